"""The API's pulse: a timestamp each replica writes every second, so that a stall is visible.

A member heartbeats through an API replica into PostgreSQL. While PostgreSQL is frozen or down,
or no replica runs, no member can, and evicting them all for it when it ends would turn a stall
into a rebalance of every group. Each write of the pulse notes whether the previous one is older
than :data:`PULSE_GAP_S`; the eviction queries count silence only from the end of the last such
gap (``qc_silence_origin``; docs/faults.md).
"""

from __future__ import annotations

import asyncio
import contextlib

import psycopg
import psycopg_pool

from core.db import AsyncPool, Conn
from data_plane.groups import queries as q
from observability.logging import get_logger

PULSE_S = 1.0
# A pulse older than this is a gap: three missed beats, well above an event-loop pause.
PULSE_GAP_S = 3.0

log = get_logger("queuecore.groups")


async def beat(conn: Conn) -> None:
    """Write the pulse once (autocommit, or the caller commits)."""
    await conn.execute(q.PULSE, {"gap_s": PULSE_GAP_S})


class Pulse:
    """Writes the pulse every :data:`PULSE_S` from one process while it runs."""

    def __init__(self, db: AsyncPool, interval_s: float = PULSE_S) -> None:
        self._db = db
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Begin beating in the background."""
        self._task = asyncio.create_task(self._run(), name="api-pulse")

    async def stop(self) -> None:
        """Stop beating."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            try:
                async with self._db.connection() as conn:
                    await beat(conn)
            except (psycopg.Error, psycopg_pool.PoolTimeout, OSError) as exc:
                log.debug("pulse_missed", error=type(exc).__name__)  # the gap is the point
            await asyncio.sleep(self._interval_s)
