"""Record-level access for a listener speaking the Kafka protocol: a topic's route, appends of
record batches (idempotent producers), reads of a partition by offset, its bounds and the
offset at a moment. The classic consumer groups such a listener needs are
``data_plane.groups.classic.ClassicGroups`` (``DataPlane.classic_groups``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from core.db import AsyncPool
from data_plane.read.reader import Bounds, ReadResult, SegmentReader, partition_bounds
from data_plane.read.seek import Seek, offset_for_timestamp
from data_plane.service.scope import Caller
from data_plane.topics.traffic import TrafficCounter
from data_plane.write.publish import PublishService, TopicRoute
from data_plane.write.records import Appended, ProducerBatch, RecordAppender
from data_plane.write.segment import Message

Metered = Callable[[str, list[Message]], None]
PayloadBytes = Callable[[list[Message]], int]


class Records:
    """Appends and reads by offset, metered as publishes and deliveries are."""

    def __init__(
        self,
        db: AsyncPool,
        publisher: PublishService,
        reader: SegmentReader,
        traffic: TrafficCounter,
        delivered: Metered,
        payload_bytes: PayloadBytes,
    ) -> None:
        self._db = db
        self._appender = RecordAppender(publisher)
        self._publisher = publisher
        self._reader = reader
        self._traffic = traffic
        self._delivered = delivered
        self._payload_bytes = payload_bytes

    async def route(self, caller: Caller, topic: str) -> TopicRoute:
        """The caller's topic as the write path sees it (cached briefly), or TopicNotFound."""
        return await self._publisher.topics.get(
            caller.organisation_id, caller.environment_id, topic
        )

    async def append(
        self,
        route: TopicRoute,
        partition: int,
        messages: list[Message],
        producer: ProducerBatch | None = None,
    ) -> Appended:
        """One record batch at consecutive offsets of ``partition``, once (see write.records)."""
        return await self._appender.append(route, partition, messages, producer)

    async def next_producer_id(self) -> int:
        """A producer id no producer of any replica had before."""
        return await self._appender.next_producer_id()

    async def read(
        self,
        caller: Caller,
        topic_id: str,
        partition: int,
        offset: int,
        limit: int,
        max_bytes: int,
    ) -> ReadResult:
        """Messages of a partition from ``offset``: at most ``limit``, and no more than fit in
        ``max_bytes`` of payload (at least one); what is returned is metered."""
        async with self._db.connection() as conn:
            result = await self._reader.read(conn, topic_id, partition, offset, limit)
        kept, size = [], 0
        for stored in result.messages:
            kept.append(stored)
            size += self._payload_bytes([stored.message])
            if size >= max_bytes:
                break
        if len(kept) < len(result.messages):
            result = replace(result, messages=kept, next_offset=kept[-1].offset + 1)
        self._delivered(caller.environment_id, [m.message for m in kept])
        self._traffic.consumed(topic_id, len(kept))
        return result

    async def bounds(self, topic_id: str, partition: int) -> Bounds:
        """A partition's earliest retained offset and its end."""
        async with self._db.connection() as conn:
            return await partition_bounds(conn, topic_id, partition)

    async def offset_at(self, topic_id: str, partition: int, timestamp_ms: int) -> Seek:
        """The first offset of a partition published at or after ``timestamp_ms``."""
        async with self._db.connection() as conn:
            return await offset_for_timestamp(conn, self._reader, topic_id, partition, timestamp_ms)
