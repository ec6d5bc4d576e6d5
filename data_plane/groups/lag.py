"""Consumer lag over time: per-minute snapshots, their purge, and the series the API serves.

A beat task (:func:`data_plane.tasks.snapshot_lag`) records every minute, for every group of
every active topic, each partition's committed offset, high watermark and lag, in one
``INSERT … SELECT`` (:func:`take_snapshots`). The Spark job :mod:`spark_pipelines.lag_analytics`
turns the snapshots into per-group buckets of lag, consume and produce rates and time to drain
(table ``lag_series``), which :func:`lag_series` reads for ``GET …/groups/{group}/lag``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from core.db import Conn
from core.errors import ValidationFailed
from data_plane.groups import queries as group_queries
from data_plane.groups import queries as q
from data_plane.groups.service import GroupNotFound, topic_of

BUCKET_S = 60  # the series the job writes on schedule and the API serves
SNAPSHOT_KEEP_S = 7 * 86_400  # snapshots and series older than this are purged
DEFAULT_SERIES_S = 3_600  # the API's window when ``since`` is not given
MAX_SERIES_S = SNAPSHOT_KEEP_S  # nothing older is kept, so no longer window is useful
PURGE_BATCH = 10_000


class LagPoint(msgspec.Struct, rename="camel"):
    """One bucket: lag at its end, rates in messages per second, seconds to drain at that pace."""

    at: datetime
    lag: int
    consume_rate: float | None
    produce_rate: float | None
    time_to_drain_s: float | None


class LagSeries(msgspec.Struct, rename="camel"):
    """``GET …/groups/{group}/lag``: the points of ``[since, until)``, oldest first."""

    topic: str
    group: str
    bucket_s: int
    since: datetime
    until: datetime
    points: list[LagPoint]


@dataclass(frozen=True, slots=True)
class PurgeReport:
    """Rows the purge deleted."""

    snapshots: int = 0
    series_points: int = 0

    def as_dict(self) -> dict[str, int]:
        """JSON-friendly (a Celery task result)."""
        return {"snapshotsPurged": self.snapshots, "seriesPointsPurged": self.series_points}


async def take_snapshots(
    conn: Conn, at: datetime | None = None, topic_id: str | None = None
) -> int:
    """Record the lag of every group of every active topic (of ``topic_id`` only, if given) for
    the minute of ``at`` (now by default); rows inserted — 0 when that minute is recorded."""
    cursor = await conn.execute(q.INSERT_SNAPSHOTS, {"at": at, "topic_id": topic_id})
    return cursor.rowcount


async def purge_snapshots(conn: Conn, keep_s: float = SNAPSHOT_KEEP_S) -> PurgeReport:
    """Delete snapshots and series points older than ``keep_s``, in batches (on an autocommit
    connection each batch is its own short transaction)."""
    snapshots = await _purge(conn, q.PURGE_SNAPSHOTS, keep_s)
    return PurgeReport(snapshots, await _purge(conn, q.PURGE_SERIES, keep_s))


async def _purge(conn: Conn, statement: str, keep_s: float) -> int:
    total = 0
    while True:
        cursor = await conn.execute(statement, {"keep_s": keep_s, "batch": PURGE_BATCH})
        total += cursor.rowcount
        if cursor.rowcount < PURGE_BATCH:
            return total


async def lag_series(
    conn: Conn,
    environment_id: str,
    topic: str,
    group: str,
    since: datetime | None = None,
    until: datetime | None = None,
) -> LagSeries:
    """The group's lag series over ``[since, until)`` (the last hour by default); 404 when the
    topic or group is not in the caller's environment."""
    since, until = series_window(since, until, datetime.now(UTC))
    group_id = await _group_id(conn, environment_id, topic, group)
    params = {"group_id": group_id, "bucket_s": BUCKET_S, "since": since, "until": until}
    rows = await (await conn.execute(q.SELECT_SERIES, params)).fetchall()
    return LagSeries(topic, group, BUCKET_S, since, until, [_point(row) for row in rows])


async def _group_id(conn: Conn, environment_id: str, topic: str, group: str) -> str:
    topic_row = await topic_of(conn, environment_id, topic)
    row = await (
        await conn.execute(group_queries.SELECT_GROUP, {"topic_id": topic_row["id"], "name": group})
    ).fetchone()
    if row is None:
        raise GroupNotFound(group)
    return str(row["id"])


def _point(row: dict[str, Any]) -> LagPoint:
    return LagPoint(
        row["bucket_start"],
        int(row["lag"]),
        row["consume_rate"],
        row["produce_rate"],
        row["time_to_drain_s"],
    )


def series_window(
    since: datetime | None, until: datetime | None, now: datetime
) -> tuple[datetime, datetime]:
    """The window asked for, times without a zone read as UTC; at most :data:`MAX_SERIES_S`."""
    until = _utc(until) if until is not None else now
    since = _utc(since) if since is not None else until - timedelta(seconds=DEFAULT_SERIES_S)
    if since >= until:
        raise ValidationFailed("since must be before until", field="since")
    if until - since > timedelta(seconds=MAX_SERIES_S):
        raise ValidationFailed(
            f"the window may span at most {MAX_SERIES_S // 86_400} days", field="since"
        )
    return since, until


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
