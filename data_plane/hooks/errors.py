"""Hook failures: counted in this process, added to PostgreSQL every second, logged sparingly.

A broken hook can fail on every message of a busy topic, so a failure costs a dictionary update
here, not a statement; :class:`HookErrorFlusher` adds the counts to the hooks' rows. A group's
stats read the rows plus what this process has not flushed yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import psycopg

from data_plane.hooks import queries as q
from observability.logging import get_logger

log = get_logger("queuecore.hooks")
FLUSH_S = 1.0
LOG_EVERY_S = 10.0  # per hook: the first failure, then at most one line this often


class HookErrors:
    """Failures of ``onEnqueue`` (by topic id) and ``onFailure`` (by group id) not flushed yet."""

    def __init__(self) -> None:
        self.topics: dict[str, int] = {}
        self.groups: dict[str, int] = {}
        self._logged: dict[str, float] = {}

    def failed(self, kind: str, owner_id: str, reason: str, **context: Any) -> None:
        """Count one failure of ``kind`` (``onEnqueue`` or ``onFailure``) and log it, sparingly."""
        counts = self.topics if kind == "onEnqueue" else self.groups
        counts[owner_id] = counts.get(owner_id, 0) + 1
        now = time.monotonic()
        if now - self._logged.get(owner_id, -LOG_EVERY_S) >= LOG_EVERY_S:
            self._logged[owner_id] = now
            log.warning("hook_failed", hook=kind, owner_id=owner_id, reason=reason, **context)

    def unflushed(self, topic_id: str, group_id: str) -> int:
        """What this process counted for a group's hooks and has not flushed."""
        return self.topics.get(topic_id, 0) + self.groups.get(group_id, 0)

    def take(self) -> tuple[dict[str, int], dict[str, int]]:
        """The counts so far, and start again from zero."""
        taken = (self.topics, self.groups)
        self.topics, self.groups = {}, {}
        return taken


Connect = Callable[[], AbstractAsyncContextManager[Any]]


class HookErrorFlusher:
    """Adds the counted failures to the hooks' rows every :data:`FLUSH_S` and when stopped."""

    def __init__(self, errors: HookErrors, connect: Connect, every_s: float = FLUSH_S) -> None:
        self.errors = errors
        self._connect = connect
        self._every_s = every_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Begin flushing in the background."""
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Stop, after a last flush."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush()

    async def flush(self) -> None:
        """Write what was counted; on a database error put it back for the next time."""
        topics, groups = self.errors.take()
        if not topics and not groups:
            return
        try:
            async with self._connect() as conn:
                for statement, counts in (
                    (q.ADD_TOPIC_HOOK_ERRORS, topics),
                    (q.ADD_GROUP_HOOK_ERRORS, groups),
                ):
                    if counts:
                        await conn.execute(
                            statement, {"ids": list(counts), "counts": list(counts.values())}
                        )
        except psycopg.Error as exc:
            log.warning("hook_errors_flush_failed", error=type(exc).__name__)
            for owner, n in topics.items():
                self.errors.topics[owner] = self.errors.topics.get(owner, 0) + n
            for owner, n in groups.items():
                self.errors.groups[owner] = self.errors.groups.get(owner, 0) + n

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._every_s)
            await self.flush()
