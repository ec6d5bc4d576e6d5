"""The recent failed pushes of a group: what its console page lists."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from core.db import Conn
from data_plane.push import queries as q

KEEP = 50  # failures kept per group; older ones are forgotten as new ones come


@dataclass(frozen=True, slots=True)
class PushFailure:
    """One failed attempt at pushing a message."""

    message_id: str
    attempt: int
    status_code: int | None
    error: str
    dead_lettered: bool
    failed_at: datetime


async def record(
    conn: Conn,
    group_id: str,
    message_id: str,
    attempt: int,
    status_code: int | None,
    error: str,
    dead_lettered: bool,
) -> None:
    """Keep one failed attempt (and only the newest :data:`KEEP` of the group)."""
    await conn.execute(
        q.INSERT_FAILURE,
        {
            "group_id": group_id,
            "message_id": message_id,
            "attempt": attempt,
            "status_code": status_code,
            "error": error,
            "dead_lettered": dead_lettered,
            "keep": KEEP - 1,
        },
    )


async def recent(conn: Conn, group_id: str, limit: int = 20) -> list[PushFailure]:
    """The group's newest failed pushes first."""
    params = {"group_id": group_id, "limit": limit}
    rows = await (await conn.execute(q.SELECT_FAILURES, params)).fetchall()
    return [PushFailure(**dict(row)) for row in rows]
