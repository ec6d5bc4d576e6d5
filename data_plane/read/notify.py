"""Wake-ups for waiting consumers: one ``LISTEN qc_publish`` connection per API process.

The writer (and acks, nacks and seeks that make messages deliverable) ``NOTIFY qc_publish``
with a JSON array of ``[topic_id, partition, next_offset]`` (partition ``-1``: any partition).
Waiters block on an ``asyncio.Event``, so an idle stream or long-poll costs no CPU and no
queries. A consumer registers (:meth:`PublishListener.watch`) *before* it looks for work and
waits on that registration afterwards, so a notification arriving in between is not lost; it
names the partitions it owns, so a publish to another member's partition does not wake it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Iterator

import msgspec
import psycopg

from core.db import Connector
from observability.logging import get_logger

CHANNEL = "qc_publish"
RECONNECT_S = 1.0
log = get_logger("queuecore.notify")


class Watch:
    """One consumer's registration for notifications of a topic (see the module docstring)."""

    def __init__(self, partitions: frozenset[int] | None) -> None:
        self.partitions = partitions  # None: any partition of the topic
        self.event = asyncio.Event()
        self.full = False  # its member holds maxInFlight messages: an ack here wakes it

    def concerns(self, partition: int) -> bool:
        """Whether a notification about ``partition`` should wake this consumer."""
        return self.partitions is None or partition < 0 or partition in self.partitions

    async def wait(self, timeout_s: float) -> bool:
        """Block until notified (possibly already) or the timeout; True when notified."""
        try:
            await asyncio.wait_for(self.event.wait(), max(timeout_s, 0))
            return True
        except TimeoutError:
            return False


class PublishListener:
    """Fans PostgreSQL notifications out to the coroutines waiting on each topic."""

    def __init__(self, database_url: str) -> None:
        self._db = Connector(database_url)
        self._waiters: dict[str, set[Watch]] = defaultdict(set)
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
        with self.watch(topic_id) as watch:
            return await watch.wait(timeout_s)

    @contextlib.contextmanager
    def watch(self, topic_id: str, partitions: frozenset[int] | None = None) -> Iterator[Watch]:
        """Register for notifications of ``topic_id`` (of these partitions) while the block runs."""
        watch = Watch(partitions)
        self._waiters[topic_id].add(watch)
        try:
            yield watch
        finally:
            self._waiters[topic_id].discard(watch)
            if not self._waiters[topic_id]:
                del self._waiters[topic_id]

    def poke(self, topic_ids: set[str]) -> None:
        """Wake every local waiter of these topics."""
        self.poke_partitions({(topic_id, -1) for topic_id in topic_ids})

    def wake_all(self) -> None:
        """Wake every local waiter, of every topic (the server is stopping)."""
        self.poke(set(self._waiters))

    def poke_full(self, topic_id: str) -> None:
        """Wake the local waiters of a topic whose members could take no more messages: an ack
        made room (acks through another replica wake them at their next lease expiry)."""
        for watch in self._waiters.get(topic_id, ()):
            if watch.full:
                watch.event.set()

    def poke_partitions(self, changed: set[tuple[str, int]]) -> None:
        """Wake the local waiters concerned by these (topic, partition) pairs."""
        for topic_id, partition in changed:
            for watch in self._waiters.get(topic_id, ()):
                if watch.concerns(partition):
                    watch.event.set()

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
        async with self._db.connection() as conn:
            await conn.execute(f"LISTEN {CHANNEL}")
            self.poke(set(self._waiters))
            await self._receive(conn.pgconn)

    async def _receive(self, pgconn: psycopg.pq.abc.PGconn) -> None:
        """Wake waiters from each notification until the connection fails (then raise).

        One reader callback on the socket for the connection's life, reading with libpq
        directly: psycopg's ``notifies()`` registers and removes the socket with the event loop
        around every read, which cost the API ~40 µs of CPU per published message when every
        flush notifies (docs/decisions.md §40).
        """
        loop = asyncio.get_running_loop()
        failed: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            try:
                pgconn.consume_input()
                while (notice := pgconn.notifies()) is not None:
                    self.poke_partitions(_partitions(notice.extra))
            except Exception as exc:  # the connection broke: reconnect (see _run)
                if not failed.done():
                    failed.set_exception(exc)

        socket = pgconn.socket
        loop.add_reader(socket, readable)
        try:
            await failed
        finally:
            loop.remove_reader(socket)


def _partitions(payload: bytes) -> set[tuple[str, int]]:
    """``(topic_id, partition)`` pairs of a notification; partition -1 when it is not given."""
    try:
        return {
            (str(item[0]), int(item[1]) if len(item) > 1 and item[1] is not None else -1)
            for item in msgspec.json.decode(payload)
        }
    except (msgspec.DecodeError, ValueError, TypeError, IndexError, KeyError):
        return set()
