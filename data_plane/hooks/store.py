"""Where hooks are kept: a topic's ``onEnqueue`` (``topic_hooks``); a group's ``onFailure`` is
saved with its configuration (:mod:`data_plane.groups.fairness`)."""

from __future__ import annotations

from core.db import Conn
from data_plane.hooks import queries as q
from data_plane.hooks.enqueue import ON_ENQUEUE
from data_plane.hooks.sandbox import compile_hook


def check_on_enqueue(source: str | None) -> None:
    """422 ``INVALID_HOOK`` unless ``source`` compiles and defines ``on_enqueue(msg)``."""
    if source is not None:
        compile_hook(source, ON_ENQUEUE, "onEnqueue")


async def set_on_enqueue(conn: Conn, topic_id: str, source: str | None) -> None:
    """Save a topic's hook (checked already), or remove it (None)."""
    if source is None:
        await conn.execute(q.DELETE_TOPIC_HOOK, {"topic_id": topic_id})
    else:
        await conn.execute(q.UPSERT_TOPIC_HOOK, {"topic_id": topic_id, "source": source})


async def on_enqueue(conn: Conn, topic_id: str) -> str | None:
    """A topic's hook source, if it has one."""
    row = await (await conn.execute(q.SELECT_TOPIC_HOOK, {"topic_id": topic_id})).fetchone()
    return None if row is None else str(row["on_enqueue"])


async def hook_errors(conn: Conn, topic_id: str, group_id: str) -> int:
    """The failures counted (and flushed) of a group's hooks: its topic's and its own."""
    params = {"topic_id": topic_id, "group_id": group_id}
    row = await (await conn.execute(q.SELECT_HOOK_ERRORS, params)).fetchone()
    return 0 if row is None else int(row["errors"])
