"""The members of a push group: its pushers only. Turning push on evicts the silent members
and is refused while live ones remain; turning it off sends the pushers away (docs/push.md)."""

from __future__ import annotations

from typing import Any

from data_plane.groups import queries as q
from data_plane.groups.service import Conn, _assign_all, _rebalance, _remove


async def make_room_for_push(conn: Conn, group_id: str) -> int:
    """Before push is turned on (the group's row locked): evict silent members and reassign;
    how many live members that are not pushers remain (push is refused while there are any)."""
    rows = await group_and_topic(conn, group_id)
    if rows is not None:
        await _rebalance(conn, rows[0], rows[1], force=False)
    row = await (await conn.execute(q.COUNT_NON_PUSHERS, {"group_id": group_id})).fetchone()
    return int(row["members"]) if row else 0


async def group_and_topic(
    conn: Conn, group_id: str
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The group's row (locked) and its active topic's, or None when either is gone."""
    group_row = await (await conn.execute(q.LOCK_GROUP_BY_ID, {"id": group_id})).fetchone()
    if group_row is None:
        return None
    params = {"id": group_row["topic_id"]}
    topic_row = await (await conn.execute(q.SELECT_ACTIVE_TOPIC_BY_ID, params)).fetchone()
    return None if topic_row is None else (dict(group_row), dict(topic_row))


async def remove_pushers(conn: Conn, group_id: str) -> int:
    """After push is turned off (the group's row locked): its pushers leave at once, their
    leases end; how many."""
    pushers = await (await conn.execute(q.SELECT_PUSHERS, {"group_id": group_id})).fetchall()
    if not pushers:
        return 0
    await _remove(conn, group_id, [row["id"] for row in pushers])
    rows = await group_and_topic(conn, group_id)
    if rows is not None:
        await _assign_all(conn, rows[0], rows[1])
    return len(pushers)
