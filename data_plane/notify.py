"""Wake-ups for waiting consumers: one ``LISTEN qc_publish`` connection per API process.

The writer (and acks, nacks and seeks that make messages deliverable) ``NOTIFY qc_publish``
with a JSON array of ``[topic_id, partition, next_offset]``. Waiters block on an
``asyncio.Event`` per topic, so an idle stream or long-poll costs no CPU and no queries.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import defaultdict

import psycopg

from observability.logging import get_logger

CHANNEL = "qc_publish"
RECONNECT_S = 1.0
log = get_logger("queuecore.notify")


class PublishListener:
    """Fans PostgreSQL notifications out to the coroutines waiting on each topic."""

    def __init__(self, database_url: str) -> None:
        self._url = database_url
        self._waiters: dict[str, set[asyncio.Event]] = defaultdict(set)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Begin listening in the background (reconnecting after failures)."""
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Stop listening."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def wait(self, topic_id: str, timeout_s: float) -> bool:
        """Block until a notification for ``topic_id`` or the timeout; True when notified."""
        event = asyncio.Event()
        self._waiters[topic_id].add(event)
        try:
            await asyncio.wait_for(event.wait(), max(timeout_s, 0))
            return True
        except TimeoutError:
            return False
        finally:
            self._waiters[topic_id].discard(event)
            if not self._waiters[topic_id]:
                del self._waiters[topic_id]

    def poke(self, topic_ids: set[str]) -> None:
        """Wake the local waiters of these topics."""
        for topic_id in topic_ids:
            for event in self._waiters.get(topic_id, ()):
                event.set()

    async def _run(self) -> None:
        while True:
            try:
                await self._listen()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("listen_failed", error=type(exc).__name__)
                # Anything published while we were away must not be missed: wake everyone.
                self.poke(set(self._waiters))
                await asyncio.sleep(RECONNECT_S)

    async def _listen(self) -> None:
        async with await psycopg.AsyncConnection.connect(self._url, autocommit=True) as conn:
            await conn.execute(f"LISTEN {CHANNEL}")
            self.poke(set(self._waiters))
            async for notice in conn.notifies():
                self.poke(_topics(notice.payload))


def _topics(payload: str) -> set[str]:
    try:
        return {str(item[0]) for item in json.loads(payload)}
    except (ValueError, TypeError, IndexError):
        return set()
