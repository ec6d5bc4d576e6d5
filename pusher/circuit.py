"""A group's back-off from an endpoint that keeps failing: one push at a time, paced, until one
succeeds again (so a dead endpoint costs a probe every so often, not the pusher's capacity)."""

from __future__ import annotations

import asyncio
import time

OPEN_AFTER = 5  # consecutive failed pushes that make a group back off
FIRST_PAUSE_S = 1.0
MAX_PAUSE_S = 60.0


class Circuit:
    """Consecutive failures of one group's pushes, and what they allow now."""

    def __init__(self) -> None:
        self.failures = 0
        self.level = 0  # pauses so far: each one that ends in another failure doubles the next
        self._next_at = 0.0

    @property
    def backing_off(self) -> bool:
        """Whether the endpoint failed :data:`OPEN_AFTER` times in a row (and not since)."""
        return self.failures >= OPEN_AFTER

    def limit(self, window: int) -> int:
        """How many messages the group may hold now: its window, or one while backing off."""
        return 1 if self.backing_off else window

    def succeeded(self) -> None:
        """A 2xx: back to the full window at once."""
        self.failures = self.level = 0
        self._next_at = 0.0

    def failed(self, now: float | None = None) -> None:
        """A failed push. From the :data:`OPEN_AFTER`-th on, the next push waits: 1 s, then
        twice as long after each pause that ended in another failure, up to a minute. Pushes
        that were already under way when a pause began do not lengthen it."""
        self.failures += 1
        now = time.monotonic() if now is None else now
        if self.backing_off and now >= self._next_at:
            self._next_at = now + min(FIRST_PAUSE_S * 2**self.level, MAX_PAUSE_S)
            self.level += 1

    def pause_s(self, now: float | None = None) -> float:
        """How long the next push must wait."""
        now = time.monotonic() if now is None else now
        return max(self._next_at - now, 0.0)

    async def turn(self) -> None:
        """Wait until a push may go (at once unless backing off)."""
        delay = self.pause_s()
        if delay > 0:
            await asyncio.sleep(delay)
