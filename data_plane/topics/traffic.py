"""Per-topic traffic: messages committed and delivered per UTC minute, for the rate charts.

Each process counts in memory, keyed by (topic, minute): the segment writer's after-commit hook
adds each committed block's message count (one dict update per block, never per message), and
every consumer-group pull adds what it leased (one per pull). :class:`TrafficFlusher` adds the
counts to ``topic_traffic`` in one upsert every few seconds (the usage meter's interval) and at
shutdown, then deletes rows older than :data:`KEEP_S`. A flush that fails puts its counts back.
A process killed without its shutdown flush loses at most one interval of counts, as the usage
meter does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, Protocol

from core.db import Conn
from core.flusher import Connect, PeriodicFlusher
from data_plane.topics import queries as q
from observability.logging import get_logger

log = get_logger("queuecore.traffic")

MINUTE_S = 60
KEEP_S = 2 * 86_400  # rows kept: the day chart plus a day of slack


class CommittedBlockCount(Protocol):
    """What the traffic counter needs of a block the writer committed."""

    @property
    def topic_id(self) -> str: ...
    @property
    def messages(self) -> list[Any]: ...


class MinuteTraffic(NamedTuple):
    """What one process counted for one topic in one UTC minute."""

    topic_id: str
    minute_s: int  # epoch seconds of the minute's start
    published: int
    consumed: int


class TrafficCounter:
    """Counts of this process since its last flush; called from the event loop only."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._counts: dict[tuple[str, int], list[int]] = {}

    def _row(self, topic_id: str) -> list[int]:
        key = (topic_id, int(self._clock()) // MINUTE_S * MINUTE_S)
        row = self._counts.get(key)
        if row is None:
            row = self._counts[key] = [0, 0]
        return row

    def committed(self, blocks: Iterable[CommittedBlockCount]) -> None:
        """The segment writer's after-commit hook: each block's messages count as published."""
        for block in blocks:
            self._row(block.topic_id)[0] += len(block.messages)

    def consumed(self, topic_id: str, messages: int) -> None:
        """Messages a consumer-group pull leased (redeliveries included)."""
        if messages:
            self._row(topic_id)[1] += messages

    def take(self) -> list[MinuteTraffic]:
        """The counts so far, in key order, and start again from zero."""
        taken = [MinuteTraffic(t, m, *row) for (t, m), row in sorted(self._counts.items())]
        self._counts = {}
        return taken

    def restore(self, rows: list[MinuteTraffic]) -> None:
        """Add rows back (a flush that failed), on top of what was counted meanwhile."""
        for row in rows:
            counts = self._counts.setdefault((row.topic_id, row.minute_s), [0, 0])
            counts[0] += row.published
            counts[1] += row.consumed


class TrafficFlusher(PeriodicFlusher[MinuteTraffic]):
    """The background task that adds a counter's counts to ``topic_traffic``."""

    def __init__(self, counter: TrafficCounter, connect: Connect, interval_s: float) -> None:
        super().__init__(counter, connect, interval_s, "topic-traffic-flush")
        self.counter = counter

    async def write(self, conn: Any, rows: list[MinuteTraffic]) -> None:
        """Add the rows and purge old ones."""
        await conn.execute(q.UPSERT_TRAFFIC, columns(rows))
        await conn.execute(q.PURGE_TRAFFIC, {"keep_s": KEEP_S})

    def log_failure(self, error: Exception) -> None:
        """Warn; the counts wait for the next flush."""
        log.warning("topic_traffic_flush_failed", error=type(error).__name__)


def columns(rows: list[MinuteTraffic]) -> dict[str, list[Any]]:
    """The upsert's parameters: one array per column."""
    return {
        "topic_ids": [row.topic_id for row in rows],
        "minute_s": [row.minute_s for row in rows],
        "published": [row.published for row in rows],
        "consumed": [row.consumed for row in rows],
    }


# --- reading ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TrafficPoint:
    """Messages published and consumed in one bucket, and their rates."""

    at: datetime  # the bucket's start
    published: int
    consumed: int
    bucket_s: int

    @property
    def publish_rate(self) -> float:
        """Published messages per second over the bucket."""
        return self.published / self.bucket_s

    @property
    def consume_rate(self) -> float:
        """Consumed messages per second over the bucket."""
        return self.consumed / self.bucket_s


@dataclass(frozen=True, slots=True)
class TrafficWindow:
    """A window the dashboard offers: its span and the bucket its points add up."""

    name: str
    label: str
    span_s: int
    bucket_s: int


WINDOWS = {
    "hour": TrafficWindow("hour", "last hour", 3600, 60),
    "day": TrafficWindow("day", "last day", 86_400, 900),
}


@dataclass(frozen=True, slots=True)
class TrafficSeries:
    """A topic's traffic over a window, one point per bucket (empty buckets included)."""

    window: TrafficWindow
    since: datetime
    until: datetime
    points: list[TrafficPoint]

    @property
    def published(self) -> int:
        """Messages published over the window."""
        return sum(point.published for point in self.points)

    @property
    def consumed(self) -> int:
        """Messages consumed over the window."""
        return sum(point.consumed for point in self.points)


def window_bounds(window: TrafficWindow, now: datetime) -> tuple[datetime, datetime]:
    """The window's first bucket start and the end of the current bucket."""
    epoch_s = int(now.timestamp())
    until_s = (epoch_s // window.bucket_s + 1) * window.bucket_s
    until = datetime.fromtimestamp(until_s, UTC)
    return until - timedelta(seconds=window.span_s), until


async def topic_traffic(
    conn: Conn, topic_id: str, window: TrafficWindow, now: datetime | None = None
) -> TrafficSeries:
    """A topic's counts over ``window``, ending with the bucket holding ``now``."""
    since, until = window_bounds(window, now or datetime.now(UTC))
    params = {"topic_id": topic_id, "since": since, "until": until, "bucket_s": window.bucket_s}
    rows = await (await conn.execute(q.SELECT_TRAFFIC, params)).fetchall()
    found = {row["bucket"]: row for row in rows}
    points = []
    at = since
    while at < until:
        row = found.get(at)
        published, consumed = (row["published"], row["consumed"]) if row else (0, 0)
        points.append(TrafficPoint(at, published, consumed, window.bucket_s))
        at += timedelta(seconds=window.bucket_s)
    return TrafficSeries(window, since, until, points)
