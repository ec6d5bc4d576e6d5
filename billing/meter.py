"""The usage meter: per-process, in-memory counts flushed every few seconds as one upsert.

Publishing, delivery and every ``/v1`` request add to counters keyed by (environment, UTC hour)
in a dict of this process: a clock read, a dict lookup and a few integer additions, no I/O
(docs/billing.md measures it). A background task of the API process (:class:`MeterFlusher`,
started by the application's resources) takes the counts every ``QUEUECORE_USAGE_FLUSH_S``
seconds (5 by default) and at shutdown, and adds them to ``usage_hourly`` in one statement
(:data:`billing.queries.UPSERT_HOURLY`), so any number of API processes add into the same rows.

Accuracy: a process that dies without its shutdown flush (SIGKILL, OOM, power loss) loses what
it counted since its last flush, at most one flush interval. A flush that fails (the database
down) puts its counts back and the next flush retries them, so an outage loses nothing unless
the process also dies; if the database committed but the answer was lost, the retry counts those
rows twice (a lost commit acknowledgement: rare, and bounded by one flush).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

from billing import queries as q
from core.flusher import Connect, PeriodicFlusher
from observability.logging import get_logger

log = get_logger("queuecore.billing")

HOUR_S = 3600
# The counters of one (environment, hour), in this order (a list: updated in place per request).
MESSAGES_IN, BYTES_IN, MESSAGES_OUT, BYTES_OUT, PUBLISH, CONSUME, ADMIN = range(7)
COUNTERS = 7
# Heartbeats and extends have a rate budget of their own ("lease") but are consume requests.
_REQUEST_INDEX = {"publish": PUBLISH, "consume": CONSUME, "admin": ADMIN, "lease": CONSUME}


class HourlyUsage(NamedTuple):
    """What one process counted for one environment in one UTC hour."""

    environment_id: str
    hour_s: int  # epoch seconds of the hour's start
    messages_in: int = 0
    bytes_in: int = 0
    messages_out: int = 0
    bytes_out: int = 0
    publish_requests: int = 0
    consume_requests: int = 0
    admin_requests: int = 0


class UsageMeter:
    """Counts of this process since its last flush, by (environment, hour).

    Called from the event loop only (no lock): an update is a few bytecodes with no ``await``.
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._counts: dict[tuple[str, int], list[int]] = {}

    def _row(self, environment_id: str) -> list[int]:
        key = (environment_id, int(self._clock()) // HOUR_S * HOUR_S)
        row = self._counts.get(key)
        if row is None:
            row = self._counts[key] = [0] * COUNTERS
        return row

    def published(self, environment_id: str, messages: int, payload_bytes: int) -> None:
        """Messages a publish request stored (or answered from an idempotency key)."""
        row = self._row(environment_id)
        row[MESSAGES_IN] += messages
        row[BYTES_IN] += payload_bytes

    def delivered(self, environment_id: str, messages: int, payload_bytes: int) -> None:
        """Messages sent to a consumer (pull, stream or browse)."""
        row = self._row(environment_id)
        row[MESSAGES_OUT] += messages
        row[BYTES_OUT] += payload_bytes

    def request(self, environment_id: str, category: str) -> None:
        """One authenticated ``/v1`` request admitted by the rate limiter."""
        self._row(environment_id)[_REQUEST_INDEX.get(category, ADMIN)] += 1

    def pending(self) -> list[HourlyUsage]:
        """What would be flushed now (a copy; the counts stay)."""
        return [HourlyUsage(env, hour, *row) for (env, hour), row in sorted(self._counts.items())]

    def take(self) -> list[HourlyUsage]:
        """The counts so far, in key order, and start again from zero."""
        taken = self.pending()
        self._counts = {}
        return taken

    def restore(self, rows: list[HourlyUsage]) -> None:
        """Add rows back (a flush that failed), on top of what was counted meanwhile."""
        for usage in rows:
            key = (usage.environment_id, usage.hour_s)
            row = self._counts.setdefault(key, [0] * COUNTERS)
            for index, value in enumerate(usage[2:]):
                row[index] += value


class MeterFlusher(PeriodicFlusher[HourlyUsage]):
    """The background task that writes a meter to ``usage_hourly``; one per API process."""

    def __init__(self, meter: UsageMeter, connect: Connect, interval_s: float) -> None:
        super().__init__(meter, connect, interval_s, "usage-meter-flush")
        self.meter = meter

    async def write(self, conn: Any, rows: list[HourlyUsage]) -> None:
        """Add the rows to ``usage_hourly``."""
        await write_hourly(conn, rows)

    def log_failure(self, error: Exception) -> None:
        """Warn, with how many rows wait for the next flush."""
        pending = len(self.meter.pending())
        log.warning("usage_flush_failed", error=type(error).__name__, pending_rows=pending)


async def write_hourly(conn: Any, rows: list[HourlyUsage]) -> None:
    """Add the rows to ``usage_hourly`` in one statement (see :data:`UPSERT_HOURLY`)."""
    await conn.execute(q.UPSERT_HOURLY, _columns(rows))


def _columns(rows: list[HourlyUsage]) -> dict[str, list[Any]]:
    """The UPSERT_HOURLY parameters: one array per column."""
    columns: dict[str, list[Any]] = {"environment_ids": [], "hours_s": []}
    names = HourlyUsage._fields[2:]
    columns.update({name: [] for name in names})
    for row in rows:
        columns["environment_ids"].append(row.environment_id)
        columns["hours_s"].append(row.hour_s)
        for name, value in zip(names, row[2:], strict=True):
            columns[name].append(value)
    return columns
