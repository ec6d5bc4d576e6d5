"""Lag snapshots and series rows for tests: written and read with plain SQL, known values."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from core.db import connect


@dataclass(frozen=True)
class GroupIds:
    """The ids behind a topic's group, as the snapshots and series store them."""

    group_id: str
    topic_id: str
    environment_id: str


def group_ids(database_url: str, topic: str, group: str = "workers") -> GroupIds:
    """The ids of the active topic ``topic``'s group ``group``."""
    with connect(database_url) as conn:
        row = conn.execute(
            "SELECT g.id, g.topic_id, g.environment_id FROM consumer_groups g"
            " JOIN topics t ON t.id = g.topic_id AND t.status = 'active'"
            " WHERE t.name = %s AND g.name = %s",
            (topic, group),
        ).fetchone()
    assert row is not None, f"no group {group} on {topic}"
    return GroupIds(row["id"], row["topic_id"], row["environment_id"])


def synthetic_group() -> GroupIds:
    """Ids no real group has: the job needs no group row, only snapshots."""
    token = secrets.token_hex(6)
    return GroupIds(f"grp_lagtest_{token}", f"top_lagtest_{token}", f"env_lagtest_{token}")


def minute(offset_min: int = 0, base: datetime | None = None) -> datetime:
    """A whole minute, ``offset_min`` after ``base`` (default: two hours ago, floored)."""
    now = base or datetime.now(UTC) - timedelta(hours=2)
    return now.replace(second=0, microsecond=0) + timedelta(minutes=offset_min)


def insert_snapshots(
    database_url: str, ids: GroupIds, rows: list[tuple[int, datetime, int, int]]
) -> None:
    """Snapshots ``(partition, taken_at, committed_offset, high_watermark)`` of one group."""
    with connect(database_url) as conn:
        conn.cursor().executemany(
            "INSERT INTO lag_snapshots (group_id, taken_at, partition, environment_id, topic_id,"
            " committed_offset, high_watermark, lag) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            [
                (ids.group_id, at, p, ids.environment_id, ids.topic_id, c, hw, max(hw - c, 0))
                for p, at, c, hw in rows
            ],
        )


def snapshots_of(database_url: str, group_id: str) -> list[dict[str, Any]]:
    """A group's snapshot rows, by time then partition."""
    with connect(database_url) as conn:
        return conn.execute(
            "SELECT * FROM lag_snapshots WHERE group_id = %s ORDER BY taken_at, partition",
            (group_id,),
        ).fetchall()


def series_of(database_url: str, group_id: str, bucket_s: int = 60) -> list[dict[str, Any]]:
    """A group's series rows, oldest first."""
    with connect(database_url) as conn:
        return conn.execute(
            "SELECT * FROM lag_series WHERE group_id = %s AND bucket_s = %s ORDER BY bucket_start",
            (group_id, bucket_s),
        ).fetchall()


def insert_point(
    database_url: str,
    ids: GroupIds,
    at: datetime,
    lag: int,
    rates: tuple[float | None, float | None, float | None] = (None, None, None),
) -> None:
    """One series point ``(consume_rate, produce_rate, time_to_drain_s)`` of a 60 s bucket."""
    with connect(database_url) as conn:
        conn.execute(
            "INSERT INTO lag_series (group_id, bucket_s, bucket_start, environment_id, topic_id,"
            " partitions, lag, consume_rate, produce_rate, time_to_drain_s)"
            " VALUES (%s, 60, %s, %s, %s, 1, %s, %s, %s, %s)",
            (ids.group_id, at, ids.environment_id, ids.topic_id, lag, *rates),
        )
