"""Failing open while Redis is unreachable: skip it for a while, probe it, warn now and then.

Used by the Redis-backed counters (API rate limits, login throttling), which fall back to
counting in the process's memory rather than refusing requests or answering 500.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

WARN_EVERY_S = 30.0


class RedisOutage:
    """Whether a counter should try Redis now, and the warnings about an outage.

    After a failure, calls skip Redis for ``retry_s`` instead of each waiting on a timeout;
    then one call probes it (the others keep skipping until it answers). The warning is logged
    at most every :data:`WARN_EVERY_S`, even if Redis flaps, so an outage does not flood the log.
    """

    def __init__(
        self,
        name: str,
        fallback: str,
        log: Any,
        *,
        retry_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.fallback = fallback
        self.retry_s = retry_s
        self.failing = False
        self._log = log
        self._clock = clock
        self._retry_at = 0.0
        self._warned_at: float | None = None

    def skip(self) -> bool:
        """True while Redis failed moments ago; False: try it (as the probe, if it failed)."""
        now = self._clock()
        if now < self._retry_at:
            return True
        if self.failing:
            self._retry_at = now + self.retry_s
        return False

    def failed(self, exc: BaseException) -> None:
        """A call to Redis failed (or timed out)."""
        now = self._clock()
        self.failing = True
        self._retry_at = now + self.retry_s
        if self._warned_at is None or now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            self._log.warning(
                f"{self.name}_redis_unavailable",
                error=type(exc).__name__,
                detail=str(exc)[:200],
                fallback=self.fallback,
                retry_in_s=self.retry_s,
            )

    def recovered(self) -> bool:
        """A call to Redis succeeded; True when that ended an outage."""
        if not self.failing:
            return False
        self.failing = False
        self._retry_at = 0.0
        self._log.info(f"{self.name}_redis_recovered")
        return True
