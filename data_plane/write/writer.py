"""The group-commit segment writer: one per API process (DESIGN §4).

Publishes from every tenant and topic wait in one buffer. A flush starts when the earliest
waiting publish is due or the buffer holds ``max_segment_bytes``: a ``standard`` publish after
its linger (~150 ms), an ``express`` one at once when no flush started within the express
linger (0 ms by default: always at once) and otherwise one linger after the last flush started,
so a busy process makes at most one express flush per linger (:meth:`SegmentWriter._due_at`;
docs/decisions.md §13 says when to raise it). While a flush uploads its object, what arrives
waits for that PUT and then goes together in the next flush (group commit). It takes everything
waiting, encodes ONE segment object with one block per (topic, partition), PUTs it, and then in ONE PostgreSQL statement (``qc_commit_flush``, its own transaction) reserves the
offsets (partition rows locked in (topic_id, partition) order), records idempotency keys, inserts
the object and block index rows and NOTIFYs ``qc_publish``. Only after the commit are the
publishes answered. A failed PUT or commit fails every publish of the flush with 503 and
commits nothing (the object, if written, is an orphan for the GC task).

A commit whose answer was lost (the connection dropped after the statement was sent) may have
landed. The writer then asks PostgreSQL itself, within ``QUEUECORE_WRITER_RESOLVE_MS``: it ends the
backend still running that commit, if any, and looks the flush's blocks up by object key. Found:
the publishes are answered with their offsets; certainly absent: 503 ``SERVICE_UNAVAILABLE``
(nothing was written); the database out of reach: 503 ``PUBLISH_OUTCOME_UNKNOWN``, which a client
resolves by idempotency key (docs/faults.md).

While a flush uploads its object the next one waits for that PUT to end, then uploads while the
first commits (see :meth:`SegmentWriter._due_in`); a PUT that runs longer than
:data:`OVERLAP_AFTER_S`, or waiting publishes of :data:`OVERLAP_MIN_BYTES` or more (enough to be
worth a PUT of their own), get another beside it, up to :data:`MAX_INFLIGHT_FLUSHES` flushes in
flight, so a slow PUT does not stall the process and big batches do not queue behind each
other. Within a partition the order of messages is the commit order.

Two conflicts are found only inside the transaction; both roll it back and re-run the flush
without the publishes concerned, PUT again under the same object key (the rolled-back commit
never referenced it, so the object is replaced, not orphaned). Re-runs go on while each resolves
something, and fail the flush after :data:`MAX_FLUSH_ATTEMPTS` that resolve nothing:
an ``idempotencyKey`` committed meanwhile by another replica (that message is answered with
the winner's offset) and a topic deleted meanwhile (its publishes get ``TOPIC_NOT_FOUND``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import os
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import msgspec
import psycopg
import psycopg_pool

from core import db
from core.db import AsyncPool, autocommit
from core.object_store import ObjectStore
from core.settings import WriterSettings
from data_plane.errors import PublishOutcomeUnknown, PublishUnavailable, TopicNotFound
from data_plane.write import queries as q
from data_plane.write.fair import FairQueue
from data_plane.write.segment import BlockRef, Message, SegmentBuilder
from data_plane.write.timing import FlushClock, PhaseTimings
from data_plane.write.triage import SlowPublishTriage
from observability import metrics
from observability.logging import get_logger

log = get_logger("queuecore.writer")

MAX_INFLIGHT_FLUSHES = 4
OVERLAP_MIN_BYTES = 64 * 1024  # waiting publishes this big start a PUT beside one in progress
OVERLAP_AFTER_S = 0.025  # a PUT starts beside one in progress only once that one ran this long
MAX_FLUSH_ATTEMPTS = 3
INLINE_ENCODE_BYTES = 64 * 1024  # smaller flushes encode on the event loop, larger in a thread
MESSAGE_OVERHEAD_BYTES = 20  # per-message columns in a block (timestamp, lengths)
RESOLVE_RETRY_S = 0.2  # between attempts to learn a lost commit's outcome
_NOT_STARTED = "no flush could start in time (earlier ones are stalled); nothing was written"
_OUTCOME_UNKNOWN_CLASSES = frozenset({"08", "57", "58", "XX"})  # SQLSTATE classes


class Entry(NamedTuple):
    """One message to write to one partition, with its idempotency key if it has one."""

    partition: int
    message: Message
    idempotency_key: str | None = None


class Placement(NamedTuple):
    """Where a message is stored (a tuple: cheap to make thousands of per flush)."""

    partition: int
    offset: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class TopicTarget:
    """What the writer needs to know about the topic of a publish."""

    id: str
    name: str
    latency_class: str
    retention_s: int
    organisation_id: str = ""  # the tenant: its share of the writer, latency triage's tags
    project_id: str = ""
    environment_id: str = ""
    weight: int = 1  # the organisation's share of the writer (data_plane.write.fair)


@dataclass(frozen=True, slots=True)
class CommittedBlock:
    """A block just committed: ``messages`` hold offsets ``base_offset`` … ``+ len - 1``."""

    topic_id: str
    partition: int
    base_offset: int
    messages: list[Message]
    object_key: str
    byte_offset: int
    byte_length: int


OnCommitted = Callable[[list[CommittedBlock]], None]
"""Called on the event loop right after each commit, e.g. to put fresh blocks in a cache."""


@dataclass(eq=False)
class _Publish:
    """One request's messages, written together in one flush (a batch is atomic)."""

    topic: TopicTarget
    entries: list[Entry]
    future: asyncio.Future[list[Placement]]
    size_bytes: int
    results: list[Placement | None] = field(default_factory=list)
    queued_s: float = 0.0  # time.monotonic() when it was handed to the writer
    expires_s: float | None = None  # its request's deadline for PostgreSQL (core.db.deadline)
    clock: FlushClock | None = None  # the stamps of the flush that answered it
    # Its first entry's idempotency key stands for all of its entries, which are consecutive in
    # one partition (a Kafka record batch): a duplicate key answers the whole publish.
    whole: bool = False

    def __post_init__(self) -> None:
        self.results = [None] * len(self.entries)

    @property
    def owner(self) -> str:
        """The organisation whose share of the writer it uses."""
        return self.topic.organisation_id

    @property
    def weight(self) -> int:
        """Its organisation's weight."""
        return self.topic.weight

    def unresolved(self) -> Iterable[tuple[int, Entry]]:
        return ((i, e) for i, e in enumerate(self.entries) if self.results[i] is None)


class _LostReply(Exception):
    """The commit statement was sent but its answer never came: it may have landed."""

    def __init__(self, backend_pid: int | None) -> None:
        super().__init__("the commit's reply was lost")
        self.backend_pid = backend_pid


class _Rollback(Exception):
    """A conflict found inside the flush transaction; the flush is re-run without it."""

    def __init__(
        self, deleted_topics: set[str] | None = None, duplicates: set[tuple[str, str]] | None = None
    ) -> None:
        super().__init__("flush rolled back")
        self.deleted_topics = deleted_topics or set()
        self.duplicates = duplicates or set()


@dataclass
class _Layout:
    """A flush's blocks and, for each block message, the publish entry it answers."""

    blocks: dict[tuple[str, int], list[Message]] = field(default_factory=dict)
    owners: dict[tuple[str, int], list[tuple[_Publish, int]]] = field(default_factory=dict)

    @classmethod
    def of(cls, publishes: list[_Publish]) -> _Layout:
        layout = cls()
        for publish in publishes:
            for index, entry in publish.unresolved():
                where = (publish.topic.id, entry.partition)
                layout.blocks.setdefault(where, []).append(entry.message)
                layout.owners.setdefault(where, []).append((publish, index))
        return layout


def entry_size(entry: Entry) -> int:
    """Approximate encoded bytes of one message, for the flush size cap."""
    message = entry.message
    headers = sum(len(k) + len(v) for k, v in message.headers.items())
    return len(message.value) + len(message.key or b"") + headers + MESSAGE_OVERHEAD_BYTES


def segment_key(now: datetime | None = None) -> str:
    """A new object key: ``segments/yyyy/mm/dd/hh/<uuid>.seg`` (UTC; the orphan GC lists by hour)."""
    hour = (now or datetime.now(UTC)).strftime("%Y/%m/%d/%H")
    return f"segments/{hour}/{uuid.uuid4().hex}.seg"


def _encode(publishes: list[_Publish]) -> tuple[_Layout, bytes, list[BlockRef]]:
    """Lay the publishes out in blocks and encode the segment object."""
    layout = _Layout.of(publishes)
    builder = SegmentBuilder()
    for (topic_id, partition), messages in layout.blocks.items():
        builder.add(topic_id, partition, messages)
    data, refs = builder.build()
    return layout, data, refs


class SegmentWriter:
    """Group-commits publishes from all tenants into one segment object per flush."""

    def __init__(
        self,
        pool: AsyncPool,
        objects: ObjectStore,
        settings: WriterSettings,
        on_committed: Iterable[OnCommitted] = (),
        *,
        triage: SlowPublishTriage | None = None,
        timings_log_s: float = 0.0,
    ) -> None:
        self.pool = pool
        self.objects = objects  # public so a test or a FaultyObjectStore can wrap it
        self.settings = settings
        self._listeners = list(on_committed)
        # Waiting publishes, per organisation (weighted deficit round robin, at most
        # org_inflight_bytes of one organisation in flushes, and one flush slot kept for others).
        self._queue: FairQueue[_Publish] = FairQueue(
            settings.org_inflight_bytes, MAX_INFLIGHT_FLUSHES - 1
        )
        self._deadline: float | None = None
        self._last_flush_start = -math.inf
        self.flushes_started = 0  # the keyless partitioner moves on with every flush
        self._wakeup = asyncio.Event()
        self._slots = asyncio.Semaphore(MAX_INFLIGHT_FLUSHES)
        self._flushes: set[asyncio.Task[None]] = set()
        # PUTs in progress: since when, and how many bytes of publishes they carry.
        self._uploading: dict[asyncio.Task[None], tuple[float, int]] = {}
        self._loop_task: asyncio.Task[None] | None = None
        self._closing = False
        self.timings = PhaseTimings()  # where the time goes, per phase (data_plane.write.timing)
        self.triage = triage
        self._timings_log_s = timings_log_s
        self._timings_task: asyncio.Task[None] | None = None

    def subscribe(self, listener: OnCommitted) -> None:
        """Call ``listener`` with the fresh blocks after every commit."""
        self._listeners.append(listener)

    async def start(self) -> None:
        """Start the flush loop on the running event loop."""
        self._loop_task = asyncio.create_task(self._run(), name="segment-writer")
        if self._timings_log_s > 0:
            self._timings_task = asyncio.create_task(self._log_timings(), name="writer-timings")

    async def close(self) -> None:
        """Flush what is waiting, wait for flushes in flight, stop."""
        self._closing = True
        self._wakeup.set()
        if self._loop_task is not None:
            await self._loop_task
        if self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)
        if self._timings_task is not None:
            self._timings_task.cancel()
            self._log_timings_now()

    async def write(
        self,
        topic: TopicTarget,
        entries: list[Entry],
        size_bytes: int | None = None,
        *,
        whole: bool = False,
    ) -> list[Placement]:
        """Write ``entries`` atomically; their placements once committed, in order.

        ``size_bytes`` (the entries' :func:`entry_size` total) saves recounting when known.
        ``whole``: the entries are one partition's run whose first entry's idempotency key
        stands for all of them (see :class:`_Publish`).
        """
        if self._closing:
            raise PublishUnavailable("this server is shutting down")
        future: asyncio.Future[list[Placement]] = asyncio.get_running_loop().create_future()
        # A client that disconnects cancels its request, never a flush already started; a
        # publish still waiting for its flush is abandoned (:meth:`_abandon`).
        future.add_done_callback(consume_exception)
        size = sum(map(entry_size, entries)) if size_bytes is None else size_bytes
        now_s, left_s = time.monotonic(), db.remaining_s()
        expires_s = None if left_s is None else now_s + left_s
        publish = _Publish(
            topic, entries, future, size, queued_s=now_s, whole=whole, expires_s=expires_s
        )
        self._queue.add(publish)
        deadline = self._due_at(topic.latency_class)
        if self._deadline is None or deadline < self._deadline:
            self._deadline = deadline
            self._wakeup.set()
        # May be due now (see _due_in); also covers max_segment_bytes, which is never smaller.
        if self._queue.bytes >= OVERLAP_MIN_BYTES or (
            self._uploading and self._queue.idle(publish.owner)
        ):
            self._wakeup.set()
        try:
            placements = await asyncio.shield(future)
        except asyncio.CancelledError:
            self._abandon(publish)
            raise
        self._resumed(publish)
        return placements

    def _resumed(self, publish: _Publish) -> None:
        """The publish's handler runs again: record the loop's lag, and triage a slow one."""
        clock = publish.clock
        if clock is None:
            return
        now_s = time.monotonic()
        self.timings.resumed(now_s - clock.answered_s)
        if self.triage is not None:
            partitions = {entry.partition for entry in publish.entries}
            where = str(partitions.pop()) if len(partitions) == 1 else "*"
            self.triage.observe(
                publish.topic, where, len(publish.entries), publish.queued_s, clock, now_s
            )

    async def _log_timings(self) -> None:
        """Every ``timings_log_s``, one ``writer_timings`` line when something changed."""
        while True:
            await asyncio.sleep(self._timings_log_s)
            self._log_timings_now()

    def _log_timings_now(self) -> None:
        if self.timings.changed:
            log.info("writer_timings", pid=os.getpid(), **self.timings.snapshot())

    def _abandon(self, publish: _Publish) -> None:
        """Drop a publish whose caller has gone, if no flush took it yet (nothing is written)."""
        if self._queue.remove(publish):
            if not self._queue:
                self._deadline = None  # the next publish sets its own (see write)
            publish.future.cancel()
            log.info("publish_abandoned", topic_id=publish.topic.id, messages=len(publish.entries))

    def _due_at(self, latency_class: str) -> float:
        """When a publish of ``latency_class`` arriving now should be flushed at the latest.

        ``standard`` waits its linger for company: fewer PUTs is the point of that class.
        ``express`` goes at once when no flush started within the express linger, and
        otherwise with the next flush, at most one linger after the last one started: an idle
        writer adds no delay, and a busy one makes at most one flush per linger instead of one
        per PUT (docs/decisions.md §13: with many producers, fewer and larger flushes cut the
        latency under load; a producer that waits for each answer pays up to one linger).
        """
        now = time.monotonic()
        linger_s = self.settings.linger_s(latency_class)
        if latency_class == "standard":
            return now + linger_s
        return max(now, self._last_flush_start + linger_s)

    # --- the flush loop ---------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            await self._wait_until_due()
            if not self._queue:
                return  # closing and drained
            if not await self._take_slot():
                continue
            batch = self._queue.take(
                self.settings.max_segment_bytes, newcomers_only=self._for_newcomers()
            )
            if not batch:  # every organisation waiting is at its cap: wait for a flush to end
                self._slots.release()
                continue
            self.flushes_started += 1
            self._last_flush_start = now_s = time.monotonic()
            # What a full flush left behind was due already: it goes with the next flush.
            self._deadline = now_s if self._queue else None
            first_s = min(publish.queued_s for publish in batch)
            task = asyncio.create_task(self._flush(batch, FlushClock(first_s, now_s)))
            self._flushes.add(task)
            self._uploading[task] = (now_s, sum(publish.size_bytes for publish in batch))
            task.add_done_callback(functools.partial(self._flush_done, batch))

    async def _take_slot(self) -> bool:
        """A flush slot; False when every waiting publish gave up first (see :meth:`_expire`)."""
        while self._slots.locked():  # every slot taken: flushes stalled on PostgreSQL or S3
            next_expiry_s = self._expire()
            if not self._queue:
                return False
            delay_s = None if next_expiry_s is None else next_expiry_s - time.monotonic()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay_s):
                    await self._slots.acquire()
                    return True
        await self._slots.acquire()
        return True

    def _expire(self) -> float | None:
        """Fail the waiting publishes whose request's deadline passed before any flush took
        them (nothing of them is written); the earliest deadline of those left."""
        now_s = time.monotonic()
        gone = [p for p in self._queue if p.expires_s is not None and p.expires_s <= now_s]
        for publish in gone:
            self._queue.remove(publish)
            _set_exception(publish.future, PublishUnavailable(_NOT_STARTED))
            log.info("publish_expired", topic_id=publish.topic.id)
        if not self._queue:
            self._deadline = None
        return min((p.expires_s for p in self._queue if p.expires_s is not None), default=None)

    def _flush_done(self, batch: list[_Publish], task: asyncio.Task[None]) -> None:
        self._queue.done(batch)
        self._flushes.discard(task)
        self._uploading.pop(task, None)
        self._slots.release()
        self._wakeup.set()

    def _upload_done(self) -> None:
        """The current flush's PUT ended: the next flush may upload while this one commits."""
        task = asyncio.current_task()
        if task is not None and self._uploading.pop(task, None) is not None:
            self._wakeup.set()

    async def _wait_until_due(self) -> None:
        while True:
            ready = self._queue.ready()  # some organisation waiting is under its caps
            if self._closing and (ready or not self._queue):
                return
            delay = self._due_in() if ready else None
            if delay is not None and delay <= 0:
                return
            self._wakeup.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wakeup.wait()

    def _due_in(self) -> float:
        """Seconds until what is waiting should be flushed (0 or less: now).

        Group commit as databases do it: with no PUT in progress, the earliest linger decides
        (express: 0 ms by default, so at once — waiting for company only adds latency when
        nothing is in flight); while a flush uploads its object, what arrives meanwhile goes
        together in the next flush, which starts as soon as that PUT ends, so its PUT overlaps
        the previous flush's commit and batches grow with the load instead of PUTs multiplying.
        Only a PUT that has run for :data:`OVERLAP_AFTER_S` (a slow one) gets another beside it,
        or :data:`OVERLAP_MIN_BYTES` waiting: grouping amortises a PUT's fixed cost, and that much
        data already pays for its own, so waiting would only add latency.
        """
        ready_bytes = self._queue.ready_bytes()
        if ready_bytes >= self.settings.max_segment_bytes:
            return 0.0
        if self._uploading and ready_bytes >= OVERLAP_MIN_BYTES:
            return 0.0
        now = time.monotonic()
        due = self._deadline if self._deadline is not None else now
        if not self._uploading or self._newcomer_behind_big_puts():
            return due - now
        return max(due, self._overlap_at()) - now

    def _overlap_at(self) -> float:
        """When a PUT may start beside the ones uploading (the newest ran long enough)."""
        return max(since for since, _ in self._uploading.values()) + OVERLAP_AFTER_S

    def _for_newcomers(self) -> bool:
        """Whether the flush starting now is due only for organisations with nothing in flight
        (see :meth:`_newcomer_behind_big_puts`): then it takes only their work, so it stays as
        small as their publishes and the flood's backlog does not ride along in it."""
        if not self._uploading or self._queue.ready_bytes() >= OVERLAP_MIN_BYTES:
            return False
        return time.monotonic() < self._overlap_at() and self._newcomer_behind_big_puts()

    def _newcomer_behind_big_puts(self) -> bool:
        """Whether an organisation with nothing in flight waits while :data:`OVERLAP_MIN_BYTES`
        or more of others' work uploads: it gets a PUT of its own at once instead of waiting for
        theirs, so a quiet tenant's publish is not held behind a flood's big objects (trickles of
        several organisations, small PUTs, still group-commit)."""
        return (
            sum(size for _, size in self._uploading.values()) >= OVERLAP_MIN_BYTES
            and self._queue.newcomer_ready()
        )

    async def _flush(self, publishes: list[_Publish], clock: FlushClock) -> None:
        try:
            await self._flush_attempts(publishes, clock)
        except Exception as exc:  # never leave a publish waiting forever
            log.error("flush_failed", error=type(exc).__name__, exc_info=exc)
            _fail(publishes, exc)

    async def _flush_attempts(self, publishes: list[_Publish], clock: FlushClock) -> None:
        key = segment_key()  # one key for every attempt: a re-run replaces the object
        fruitless = 0
        while fruitless < MAX_FLUSH_ATTEMPTS:
            live = [p for p in publishes if not p.future.done()]
            waiting = _waiting(live)
            if not live:
                return
            if not waiting:
                _succeed(live)
                return
            try:
                await self._flush_once(live, key, clock)
                return
            except _Rollback as conflict:
                await self._settle_conflict(live, conflict)
            still = _waiting([p for p in live if not p.future.done()])
            fruitless = fruitless + 1 if still >= waiting else 0
        _fail(publishes, PublishUnavailable("publishes kept conflicting; retry"))

    async def _flush_once(self, publishes: list[_Publish], key: str, clock: FlushClock) -> None:
        started = time.perf_counter()
        if sum(p.size_bytes for p in publishes) < INLINE_ENCODE_BYTES:
            layout, data, refs = _encode(publishes)
        else:  # zstd releases the GIL: big flushes compress beside the event loop
            layout, data, refs = await asyncio.to_thread(_encode, publishes)
        try:
            await self.objects.put_async(key, data)
        except Exception as exc:
            log.warning("segment_put_failed", detail=f"{type(exc).__name__}: {exc}"[:300])
            _fail(publishes, PublishUnavailable("the object store write failed"))
            _observe_flush(started, len(data), refs, "put_failed")
            return
        finally:
            self._upload_done()
        clock.put_done_s = time.monotonic()
        try:
            try:
                with db.deadline(_latest_wait_s(publishes)):
                    bases = await self._commit(key, len(data), refs, layout)
            except _LostReply as lost:
                log.warning("segment_commit_reply_lost", object_key=key)
                bases = await self._resolve(key, lost)
        except _Rollback:
            _observe_flush(started, len(data), refs, "conflict")
            raise
        except PublishOutcomeUnknown as unknown:
            _fail(publishes, unknown)
            _observe_flush(started, len(data), refs, "outcome_unknown")
            return
        except (psycopg.Error, psycopg_pool.PoolTimeout, OSError) as exc:
            log.warning("segment_commit_failed", error=type(exc).__name__, detail=str(exc)[:200])
            _fail(publishes, PublishUnavailable("the offset commit failed"))
            _observe_flush(started, len(data), refs, "commit_failed")
            return
        clock.committed_s = time.monotonic()
        _observe_flush(started, len(data), refs, "committed")
        blocks = _assign(key, refs, layout, bases)
        _succeed(publishes, clock)
        clock.answered_s = time.monotonic()
        self.timings.flushed(clock, sum(ref.count for ref in refs))
        self._announce(blocks)

    async def _commit(
        self,
        key: str,
        size: int,
        refs: list[BlockRef],
        layout: _Layout,
    ) -> dict[tuple[str, int], int]:
        # One statement in autocommit mode: one round trip, and the partition locks are held
        # only while the server runs it (see infra/migrations/0007_commit_flush.sql).
        params = _commit_params(key, size, refs, layout)
        async with self.pool.connection() as conn, autocommit(conn):
            backend_pid = conn.info.backend_pid
            try:
                with metrics.db_statement("commit_flush"):
                    rows = await (await conn.execute(q.COMMIT_FLUSH, params)).fetchall()
            except psycopg.Error as exc:
                conflict = _conflict_of(exc)
                if conflict is not None:
                    raise conflict from None
                if _rolled_back(exc, conn):
                    raise
                raise _LostReply(backend_pid) from exc
        bases = [row["base_offset"] for row in rows]
        return {(r.topic_id, r.partition): base for r, base in zip(refs, bases, strict=True)}

    async def _resolve(self, key: str, lost: _LostReply) -> dict[tuple[str, int], int]:
        """The bases of a commit whose reply was lost, if it landed (see the module's doc).

        Raises :class:`PublishUnavailable` when it certainly did not land, and
        :class:`PublishOutcomeUnknown` when PostgreSQL could not tell within the resolve time.
        """
        deadline = time.monotonic() + self.settings.resolve_ms / 1000
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                async with asyncio.timeout(remaining):
                    found = await self._landed(key, lost.backend_pid, remaining)
            except (psycopg.Error, psycopg_pool.PoolTimeout, OSError, TimeoutError) as exc:
                log.info("commit_outcome_pending", object_key=key, error=type(exc).__name__)
                await asyncio.sleep(min(RESOLVE_RETRY_S, max(0.0, deadline - time.monotonic())))
                continue
            if found is None:
                await asyncio.sleep(min(RESOLVE_RETRY_S, max(0.0, deadline - time.monotonic())))
                continue
            if found:
                log.info("commit_outcome_resolved", object_key=key, landed=True)
                return found
            log.info("commit_outcome_resolved", object_key=key, landed=False)
            raise PublishUnavailable("the offset commit failed")
        raise PublishOutcomeUnknown("the commit's reply was lost and PostgreSQL could not tell")

    async def _landed(
        self, key: str, backend_pid: int | None, timeout_s: float
    ) -> dict[tuple[str, int], int] | None:
        """The flush's bases when committed, ``{}`` when certainly not, ``None`` if still running."""
        async with self.pool.connection(timeout=timeout_s) as conn, autocommit(conn):
            if backend_pid is not None:
                ended = await (
                    await conn.execute(q.END_LOST_COMMIT, {"pid": backend_pid})
                ).fetchone()
                if ended is not None and not ended["ended"]:
                    return None
            rows = await (
                await conn.execute(q.SELECT_BLOCKS_OF_OBJECT, {"object_key": key})
            ).fetchall()
        return {(row["topic_id"], row["partition"]): row["base_offset"] for row in rows}

    async def _settle_conflict(self, publishes: list[_Publish], conflict: _Rollback) -> None:
        for publish in publishes:
            if publish.topic.id in conflict.deleted_topics:
                _set_exception(publish.future, TopicNotFound(publish.topic.name))
        if conflict.duplicates:
            winners = await self._winners(conflict.duplicates)
            for publish in publishes:
                if publish.whole:
                    _settle_whole(publish, winners)
                    continue
                for index, entry in list(publish.unresolved()):
                    found = winners.get((publish.topic.id, entry.idempotency_key or ""))
                    if entry.idempotency_key is not None and found is not None:
                        publish.results[index] = found

    async def _winners(self, duplicates: set[tuple[str, str]]) -> dict[tuple[str, str], Placement]:
        topic_ids, keys = zip(*sorted(duplicates), strict=True)
        async with self.pool.connection() as conn:
            rows = await (
                await conn.execute(
                    q.SELECT_IDEMPOTENCY_KEYS_MANY,
                    {"topic_ids": list(topic_ids), "keys": list(keys)},
                )
            ).fetchall()
        return {
            (row["topic_id"], row["idempotency_key"]): Placement(
                row["partition"], row["offset"], epoch_ms(row["published_at"])
            )
            for row in rows
        }

    def _announce(self, blocks: list[CommittedBlock]) -> None:
        for listener in self._listeners:
            try:
                listener(blocks)
            except Exception as exc:
                log.warning("on_committed_listener_failed", error=type(exc).__name__, exc_info=exc)


def _observe_flush(started: float, size: int, refs: list[BlockRef], outcome: str) -> None:
    """Record one flush attempt: three records per flush, whatever its message count."""
    attributes = metrics.flush_attributes(outcome)
    metrics.FLUSH_DURATION.record(time.perf_counter() - started, attributes)
    metrics.FLUSH_SIZE.record(size, attributes)
    metrics.FLUSH_MESSAGES.record(sum(ref.count for ref in refs), attributes)


# --- the commit statement --------------------------------------------------------------------


def _commit_params(key: str, size: int, refs: list[BlockRef], layout: _Layout) -> dict[str, Any]:
    """The arguments of ``qc_commit_flush``: the blocks, then the idempotency keys, as JSON."""
    blocks = {(r.topic_id, r.partition): number for number, r in enumerate(refs, start=1)}
    keys: list[tuple[int, str, int, int, int]] = []
    for where, owners in layout.owners.items():
        for position, (publish, index) in enumerate(owners):
            entry = publish.entries[index]
            if entry.idempotency_key is not None:
                published = entry.message.timestamp_ms
                expires = published + publish.topic.retention_s * 1000
                keys.append((blocks[where], entry.idempotency_key, position, published, expires))
    rows = [
        (
            r.topic_id,
            r.partition,
            r.count,
            r.offset,
            r.length,
            r.min_timestamp_ms,
            r.max_timestamp_ms,
        )
        for r in refs
    ]
    return {
        "object_key": key,
        "size_bytes": size,
        "blocks": msgspec.json.encode(rows).decode(),
        "keys": msgspec.json.encode(keys).decode(),
    }


def _rolled_back(exc: psycopg.Error, conn: psycopg.AsyncConnection[Any]) -> bool:
    """Whether PostgreSQL itself answered ``exc`` for the statement, so it certainly rolled back.

    No SQLSTATE, a broken or closed connection, or a connection/shutdown/system class error
    (the server may have died after committing) leave the outcome unknown; a statement timeout
    (57014) is answered before any commit.
    """
    state = exc.sqlstate
    if state is None or conn.broken or conn.closed:
        return False
    return state == "57014" or state[:2] not in _OUTCOME_UNKNOWN_CLASSES


def _conflict_of(exc: psycopg.Error) -> _Rollback | None:
    """The flush conflict ``qc_commit_flush`` raised, if that is what ``exc`` is."""
    detail = exc.diag.message_detail or ""
    if exc.sqlstate == "QC404":
        return _Rollback(deleted_topics=set(detail.split(",")))
    if exc.sqlstate == "QC409":
        return _Rollback(
            duplicates={(topic_id, key) for topic_id, key in msgspec.json.decode(detail)}
        )
    return None


def _assign(
    key: str, refs: list[BlockRef], layout: _Layout, bases: dict[tuple[str, int], int]
) -> list[CommittedBlock]:
    blocks = []
    for ref in refs:
        where = (ref.topic_id, ref.partition)
        base = bases[where]
        for position, (publish, index) in enumerate(layout.owners[where]):
            message = publish.entries[index].message
            publish.results[index] = Placement(ref.partition, base + position, message.timestamp_ms)
        blocks.append(
            CommittedBlock(
                ref.topic_id, ref.partition, base, layout.blocks[where], key, ref.offset, ref.length
            )
        )
    return blocks


def _settle_whole(publish: _Publish, winners: dict[tuple[str, str], Placement]) -> None:
    """A whole publish whose first key was committed by another request: all of it was."""
    first = publish.entries[0]
    found = winners.get((publish.topic.id, first.idempotency_key or ""))
    if first.idempotency_key is None or found is None:
        return
    for index in range(len(publish.entries)):
        publish.results[index] = Placement(
            found.partition, found.offset + index, found.timestamp_ms
        )


# --- futures ----------------------------------------------------------------------------------


def _latest_wait_s(publishes: list[_Publish]) -> float | None:
    """How long the flush's commit may wait on PostgreSQL: until the last of its publishes'
    requests gives up (no limit when one of them has none)."""
    expiries = [p.expires_s for p in publishes]
    if any(expires_s is None for expires_s in expiries):
        return None
    return max(e for e in expiries if e is not None) - time.monotonic()


def _waiting(publishes: list[_Publish]) -> int:
    """How many entries of ``publishes`` still need an offset."""
    return sum(1 for publish in publishes for _ in publish.unresolved())


def _succeed(publishes: list[_Publish], clock: FlushClock | None = None) -> None:
    for publish in publishes:
        if not publish.future.done():
            publish.clock = clock
            results = publish.results
            assert all(r is not None for r in results)
            publish.future.set_result([r for r in results if r is not None])


def _fail(publishes: list[_Publish], exc: BaseException) -> None:
    for publish in publishes:
        _set_exception(publish.future, exc)


def _set_exception(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)


def consume_exception(future: asyncio.Future[Any]) -> None:
    """A done-callback that retrieves a future's exception, so asyncio does not log it unread."""
    if not future.cancelled():
        future.exception()


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def epoch_ms(moment: datetime) -> int:
    """Milliseconds since the Unix epoch."""
    return (moment - _EPOCH) // _MS
