"""Committed offsets: read, seek one partition, reset all."""

from __future__ import annotations

from core.errors import ValidationFailed
from data_plane.delivery import queries as q
from data_plane.delivery.model import Conn, GroupRef
from data_plane.delivery.store import wake
from data_plane.groups import queries as gq
from data_plane.groups.service import GroupHasActiveMembers, sweep


async def offsets(conn: Conn, ref: GroupRef, partition: int | None) -> list[dict[str, int]]:
    """``{partition, current, latest, lag}`` per partition."""
    rows = await (
        await conn.execute(
            q.SELECT_OFFSETS,
            {"group_id": ref.id, "topic_id": ref.topic_id, "partition": partition},
        )
    ).fetchall()
    if partition is not None and not rows:
        raise ValidationFailed(
            f"partition {partition} does not exist on this topic", field="partition"
        )
    return [
        {
            "partition": r["partition"],
            "current": r["committed_offset"],
            "latest": r["next_offset"],
            "lag": max(r["next_offset"] - r["committed_offset"], 0),
        }
        for r in rows
    ]


async def seek(conn: Conn, ref: GroupRef, partition: int, offset: int) -> dict[str, int]:
    """Deliver ``partition`` from ``offset`` on; in-flight leases of it are dropped."""
    bounds = await offsets(conn, ref, partition)
    row = await (
        await conn.execute(
            q.SELECT_OFFSETS,
            {"group_id": ref.id, "topic_id": ref.topic_id, "partition": partition},
        )
    ).fetchone()
    assert row is not None
    if not row["start_offset"] <= offset <= row["next_offset"]:
        raise ValidationFailed(
            f"offset must be between {row['start_offset']} and {row['next_offset']}", field="offset"
        )
    where = {"group_id": ref.id, "partition": partition}
    await conn.execute(q.LOCK_GROUP_PARTITION, where)
    await conn.execute(q.FORGET_PARTITION_DELIVERIES, where)
    await conn.execute(q.FORGET_PARTITION_LEASES, where)
    await conn.execute(q.SEEK_PARTITION, {**where, "offset": offset})
    await wake(conn, ref.topic_id, partition)
    return {**bounds[0], "current": offset, "lag": max(bounds[0]["latest"] - offset, 0)}


async def reset(
    conn: Conn, environment_id: str, ref: GroupRef, to: str | int
) -> list[dict[str, int]]:
    """Move every partition to ``earliest``, ``latest`` or an offset; refused while members are active."""
    await sweep(conn, environment_id, ref.topic, ref.name)
    members = await (await conn.execute(gq.COUNT_MEMBERS, {"group_id": ref.id})).fetchone()
    if members and members["n"]:
        raise GroupHasActiveMembers(
            f"The group has {members['n']} active consumer(s); stop them before resetting offsets.",
            consumers=members["n"],
        )
    for row in await (
        await conn.execute(
            q.SELECT_OFFSETS, {"group_id": ref.id, "topic_id": ref.topic_id, "partition": None}
        )
    ).fetchall():
        target = (
            row["start_offset"]
            if to == "earliest"
            else row["next_offset"]
            if to == "latest"
            else int(to)
        )
        await seek(
            conn, ref, row["partition"], min(max(target, row["start_offset"]), row["next_offset"])
        )
    return await offsets(conn, ref, None)
