"""Appending a Kafka client's record batch to one partition, with idempotent producers.

A batch is one atomic write of consecutive offsets in the partition its client chose, through the
same writer as a REST publish (so it is answered only once its segment is on S3 and its offsets
are committed), checked against the same tier limits per record.

Idempotent producers: a batch with a producer id carries the idempotency key
``kafka:<producer id>:<epoch>:<partition>:<base sequence>`` on its first record, and the writer
treats that key as standing for the whole batch. A retry of a batch already committed (within the
topic's retention, across restarts and replicas: the key is in ``idempotency_keys``) is answered
with the original offsets and stores nothing; a retry while the original is still being written
in this process waits for the original's answer; one racing it from another replica loses in the
commit and is answered with the winner's offsets. Sequence order is checked per producer and
partition within the process: a batch whose predecessor is still being written waits for it (and
fails if it failed), and a gap is :class:`OutOfOrderSequence`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import NamedTuple

from data_plane.errors import MessageTooLarge, PublishUnavailable, TopicNotFound
from data_plane.write import queries as q
from data_plane.write.accounting import PublishRecord
from data_plane.write.publish import PublishService, TopicRoute
from data_plane.write.segment import Message
from data_plane.write.writer import MESSAGE_OVERHEAD_BYTES, Entry, Placement, consume_exception

MAX_PRODUCER_STATES = 100_000


class PartitionNotFound(TopicNotFound):
    """The topic exists but has no such partition."""


class OutOfOrderSequence(Exception):
    """A batch's first sequence number does not follow the producer's last one."""

    def __init__(self, expected: int, got: int) -> None:
        super().__init__(f"expected sequence {expected}, got {got}")
        self.expected = expected
        self.got = got


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    """The idempotence fields of a record batch."""

    producer_id: int
    epoch: int
    base_sequence: int
    count: int

    @property
    def next_sequence(self) -> int:
        """The sequence the producer's next batch starts with."""
        return (self.base_sequence + self.count) & 0x7FFF_FFFF

    def key(self, partition: int) -> str:
        """The idempotency key standing for this batch."""
        return f"kafka:{self.producer_id}:{self.epoch}:{partition}:{self.base_sequence}"


class Appended(NamedTuple):
    """Where a batch landed: its first offset and its append time; ``duplicate`` for a retry."""

    base_offset: int
    timestamp_ms: int
    duplicate: bool = False


@dataclass
class _ProducerState:
    epoch: int
    next_sequence: int


class RecordAppender:
    """Appends record batches through the process's publish service and writer."""

    def __init__(self, publisher: PublishService) -> None:
        self.publisher = publisher
        self._producers: dict[tuple[int, str, int], _ProducerState] = {}
        self._inflight: dict[tuple[str, str], asyncio.Future[Appended]] = {}
        # The last batch to arrive per producer, topic and partition: each batch waits for the
        # one before it, in arrival order (a producer pipelines up to five), before its check.
        self._tails: dict[tuple[int, str, int], asyncio.Future[None]] = {}

    async def next_producer_id(self) -> int:
        """A producer id no other producer of any replica ever had."""
        async with self.publisher.pool.connection() as conn:
            row = await (await conn.execute(q.NEXT_PRODUCER_ID)).fetchone()
        assert row is not None
        return int(row["producer_id"])

    async def route(self, organisation_id: str, environment_id: str, topic: str) -> TopicRoute:
        """The topic as the write path sees it (cached briefly), or :class:`TopicNotFound`."""
        return await self.publisher.topics.get(organisation_id, environment_id, topic)

    async def append(
        self,
        route: TopicRoute,
        partition: int,
        messages: list[Message],
        producer: ProducerBatch | None = None,
    ) -> Appended:
        """Store ``messages`` at consecutive offsets of ``partition``, once."""
        if not 0 <= partition < route.partitions:
            raise PartitionNotFound(route.target.name)
        size = _check_sizes(route, messages)
        if producer is None:
            return await self._write(route, partition, messages, size, None)
        key = producer.key(partition)
        original = self._inflight.get((route.target.id, key))
        if original is not None:
            first = await asyncio.shield(original)
            return first._replace(duplicate=True)
        where = (producer.producer_id, route.target.id, partition)
        previous, mine = self._tails.get(where), asyncio.get_running_loop().create_future()
        self._tails[where] = mine  # joined the line before any wait: arrival order is kept
        try:
            if previous is not None:
                await asyncio.shield(previous)  # the batch sent before this one has its answer
            await self._follow(route.target.id, partition, producer)
            committed = await self.publisher.committed_keys(route.target.id, [key])
            if key in committed:
                found = committed[key]
                return Appended(found.offset, found.timestamp_ms, duplicate=True)
            return await self._write_once(route, partition, messages, size, producer)
        finally:
            mine.set_result(None)
            if self._tails.get(where) is mine:
                del self._tails[where]

    async def _follow(self, topic_id: str, partition: int, producer: ProducerBatch) -> None:
        """Refuse a gap after the producer's previous batch to this partition (which has its
        answer: batches wait for the one sent before them)."""
        state = self._producers.get((producer.producer_id, topic_id, partition))
        if state is None or state.epoch != producer.epoch:
            return
        if producer.base_sequence > state.next_sequence:  # a retried earlier batch is fine
            raise OutOfOrderSequence(state.next_sequence, producer.base_sequence)

    async def _write_once(
        self,
        route: TopicRoute,
        partition: int,
        messages: list[Message],
        size: int,
        producer: ProducerBatch,
    ) -> Appended:
        topic_id = route.target.id
        where = (producer.producer_id, topic_id, partition)
        future: asyncio.Future[Appended] = asyncio.get_running_loop().create_future()
        future.add_done_callback(consume_exception)
        self._inflight[(topic_id, producer.key(partition))] = future
        try:
            appended = await self._write(route, partition, messages, size, producer)
        except BaseException as exc:
            future.set_exception(
                exc if isinstance(exc, Exception) else PublishUnavailable("cancelled")
            )
            raise
        finally:
            self._inflight.pop((topic_id, producer.key(partition)), None)
        # Known only once written: a failed first batch leaves the producer unknown, so its
        # retry is taken (not refused against a sequence it never reached).
        if len(self._producers) >= MAX_PRODUCER_STATES:
            self._producers.clear()
        self._producers[where] = _ProducerState(producer.epoch, producer.next_sequence)
        future.set_result(appended)
        return appended

    async def _write(
        self,
        route: TopicRoute,
        partition: int,
        messages: list[Message],
        size: int,
        producer: ProducerBatch | None,
    ) -> Appended:
        key = None if producer is None else producer.key(partition)
        entries = [Entry(partition, message) for message in messages]
        entries[0] = Entry(partition, messages[0], key)
        placements: list[Placement] = await self.publisher.writer.write(
            route.target, entries, size, whole=key is not None
        )
        self._meter(route, placements, size)
        return Appended(placements[0].offset, placements[0].timestamp_ms)

    def _meter(self, route: TopicRoute, placements: list[Placement], size: int) -> None:
        target = route.target
        self.publisher.accounting.record(
            PublishRecord(
                target.organisation_id,
                target.environment_id,
                target.name,
                route.exactly_once,
                target.latency_class,
                len(placements),
                size,
                placements,
            )
        )


def _check_sizes(route: TopicRoute, messages: list[Message]) -> int:
    """Every record within the tier's message size; the batch's size for the writer."""
    limit = route.limits.max_message_bytes
    total = 0
    for index, message in enumerate(messages):
        size = len(message.value) + len(message.key or b"")
        if message.headers:
            size += sum(len(k.encode()) + len(v.encode()) for k, v in message.headers.items())
        if size > limit:
            raise MessageTooLarge(index, size, limit, route.tier)
        total += size + MESSAGE_OVERHEAD_BYTES
    return total
