"""The read path: the messages of one partition from an offset, out of segment objects on S3.

One indexed query finds the block holding the offset and the blocks after it; each block not in
the :class:`BlockCache` is fetched with one ranged GET on the event loop (big blocks decode in a
worker thread), checked against its index row (topic, partition, message count) and cached.

Offsets (``earliest`` = ``partitions.start_offset``, the first retained offset; ``latest`` =
``partitions.next_offset``, the offset the next publish gets, i.e. one past the last message):

- ``earliest <= offset < latest``: up to ``limit`` messages from ``offset`` on;
- ``offset == latest``: the tail, not an error: no messages, ``next_offset == latest``;
- ``offset < earliest`` (dropped by retention) or ``offset > latest`` (never written):
  :class:`OffsetOutOfRange` (HTTP 416) carrying ``offset``, ``earliest`` and ``latest``, so a
  client can seek to a valid position.

A topic being deleted reads as not found.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from core.db import Conn
from core.errors import ClientError, NotFound, ServerError, Unavailable
from core.object_store import ObjectNotFound, ObjectStore
from data_plane.errors import TopicNotFound
from data_plane.read import queries as q
from data_plane.read.cache import BlockCache
from data_plane.write.segment import Message, SegmentCorrupt, decode_block

INLINE_DECODE_BYTES = 256 * 1024  # smaller blocks decode on the event loop, larger in a thread


class OffsetOutOfRange(ClientError):
    """The offset is before the earliest retained message or past the end of the partition."""

    code = "OFFSET_OUT_OF_RANGE"

    def __init__(self, offset: int, earliest: int, latest: int) -> None:
        where = "before the earliest retained" if offset < earliest else "past the end"
        super().__init__(
            f"Offset {offset} is {where} offset of this partition: valid offsets are "
            f"{earliest}..{latest} ({latest} is the end, where new messages will appear).",
            offset=offset,
            earliest=earliest,
            latest=latest,
        )


class PartitionNotFound(NotFound):
    """The topic has no such partition."""

    code = "PARTITION_NOT_FOUND"

    def __init__(self, topic: str, partition: int, partitions: int | None = None) -> None:
        valid = f" (it has partitions 0..{partitions - 1})" if partitions else ""
        super().__init__(
            f"Topic '{topic}' has no partition {partition}{valid}.",
            topic=topic,
            partition=partition,
        )


class SegmentUnreadable(ServerError):
    """A committed block is missing from S3 or fails verification: never returned as data."""

    code = "SEGMENT_UNREADABLE"

    def __init__(self, block: BlockRow, problem: str) -> None:
        super().__init__(
            f"The stored block for offsets {block.base_offset}..{block.last_offset} cannot be "
            f"read ({problem}); no data was returned.",
            object_key=block.object_key,
            base_offset=block.base_offset,
        )


class ObjectStoreUnavailable(Unavailable):
    """S3 did not answer a read."""

    def __init__(self, error: Exception) -> None:
        super().__init__(
            f"Object storage is unavailable ({type(error).__name__}); retry shortly.",
            retry_after_s=1,
        )


@dataclass(frozen=True, slots=True)
class BlockRow:
    """One ``segment_blocks`` row: where consecutive offsets of a partition live."""

    base_offset: int
    count: int
    object_key: str
    byte_offset: int
    byte_length: int

    @property
    def last_offset(self) -> int:
        """Offset of the block's last message."""
        return self.base_offset + self.count - 1


class _ObjectVanished(Exception):
    """The object a block row points at is not in the store (possibly just garbage-collected)."""

    def __init__(self, block: BlockRow) -> None:
        super().__init__(block.object_key)
        self.block = block


@dataclass(frozen=True, slots=True)
class TopicRef:
    """What the read path needs to know of a topic."""

    id: str
    name: str
    partitions: int


async def find_topic(conn: Conn, environment_id: str, name: str) -> TopicRef:
    """The active topic called ``name`` in the environment, else :class:`TopicNotFound`."""
    cur = await conn.execute(
        q.SELECT_ACTIVE_TOPIC_BY_NAME, {"environment_id": environment_id, "name": name}
    )
    row = await cur.fetchone()
    if row is None:
        raise TopicNotFound(name)
    return TopicRef(row["id"], row["name"], row["partitions"])


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message at its offset."""

    offset: int
    message: Message


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Messages read from a partition and where the partition's offsets stand."""

    messages: list[StoredMessage]
    next_offset: int
    earliest_offset: int
    latest_offset: int


@dataclass(frozen=True, slots=True)
class Bounds:
    """A partition's earliest retained offset and its end."""

    earliest: int
    latest: int


async def partition_bounds(conn: Conn, topic_id: str, partition: int) -> Bounds:
    """Earliest and end offsets; a topic being deleted is :class:`TopicNotFound`."""
    cur = await conn.execute(
        q.SELECT_PARTITION_BOUNDS, {"topic_id": topic_id, "partition": partition}
    )
    row = await cur.fetchone()
    if row is None:
        raise PartitionNotFound(topic_id, partition)
    if row["status"] != "active":
        raise TopicNotFound(topic_id)
    return Bounds(row["start_offset"], row["next_offset"])


class SegmentReader:
    """Reads partitions through the block cache; one per process, shared by all requests."""

    def __init__(self, objects: ObjectStore, cache: BlockCache | None = None) -> None:
        self.objects = objects
        self.cache = cache if cache is not None else BlockCache()

    async def read(
        self, conn: Conn, topic_id: str, partition: int, offset: int | None, limit: int
    ) -> ReadResult:
        """Up to ``limit`` messages from ``offset`` (default: the earliest retained)."""
        try:
            return await self._read_once(conn, topic_id, partition, offset, limit)
        except _ObjectVanished:
            # GC deleted an object whose blocks retention or compaction had just dropped or
            # moved: the index now says where the offsets are (or that they are gone).
            try:
                return await self._read_once(conn, topic_id, partition, offset, limit)
            except _ObjectVanished as exc:
                raise SegmentUnreadable(exc.block, "object missing from storage") from exc

    async def read_blocks(
        self,
        conn: Conn,
        topic_id: str,
        partition: int,
        blocks: Sequence[BlockRow],
        start: int,
        end: int,
    ) -> list[Message]:
        """The messages at offsets ``start, start + 1, …`` (up to ``end``), from block rows the
        caller selected in its own transaction.

        Saves :meth:`read`'s two index queries and a wrapper object per message on a hot path
        (consumer-group pulls); anything unusual (blocks not covering ``start``, an object gone)
        takes the full :meth:`read`.
        """
        if blocks and blocks[0].base_offset <= start < end:
            try:
                return _run(blocks, await self._load(topic_id, partition, blocks), start, end)
            except _ObjectVanished:
                pass
        result = await self.read(conn, topic_id, partition, start, end - start)
        return [stored.message for stored in result.messages]

    async def _read_once(
        self, conn: Conn, topic_id: str, partition: int, offset: int | None, limit: int
    ) -> ReadResult:
        bounds = await partition_bounds(conn, topic_id, partition)
        start = bounds.earliest if offset is None else offset
        if not bounds.earliest <= start <= bounds.latest:
            raise OffsetOutOfRange(start, bounds.earliest, bounds.latest)
        end = min(start + limit, bounds.latest)
        if start == end:
            return ReadResult([], start, bounds.earliest, bounds.latest)
        blocks = await self._blocks(conn, topic_id, partition, start, end)
        if not blocks or blocks[0].base_offset > start:
            # Retention dropped the blocks between the two queries.
            fresh = await partition_bounds(conn, topic_id, partition)
            raise OffsetOutOfRange(start, fresh.earliest, fresh.latest)
        decoded = await self._load(topic_id, partition, blocks)
        messages = _slice(blocks, decoded, start, end)
        next_offset = messages[-1].offset + 1 if messages else start
        return ReadResult(messages, next_offset, bounds.earliest, bounds.latest)

    async def _blocks(
        self, conn: Conn, topic_id: str, partition: int, start: int, end: int
    ) -> list[BlockRow]:
        params = {"topic_id": topic_id, "partition": partition, "offset": start, "end": end}
        cur = await conn.execute(q.SELECT_BLOCKS_FROM, params)
        return [BlockRow(**row) for row in await cur.fetchall()]

    async def _load(
        self, topic_id: str, partition: int, blocks: Sequence[BlockRow]
    ) -> list[Sequence[Message]]:
        """Each block's messages: from the cache, or fetched with concurrent ranged GETs."""
        cached = [self._cached(topic_id, partition, block) for block in blocks]
        missing = [i for i, messages in enumerate(cached) if messages is None]
        fetched = await asyncio.gather(
            *(self._fetch(topic_id, partition, blocks[i]) for i in missing)
        )
        for i, messages in zip(missing, fetched, strict=True):
            cached[i] = messages
        return [messages for messages in cached if messages is not None]

    def _cached(self, topic_id: str, partition: int, block: BlockRow) -> Sequence[Message] | None:
        messages = self.cache.get(topic_id, partition, block.base_offset)
        if messages is not None and len(messages) != block.count:
            # Rewritten under a different block layout (compaction): fetch it again.
            self.cache.discard(topic_id, partition, block.base_offset)
            return None
        return messages

    async def _fetch(self, topic_id: str, partition: int, block: BlockRow) -> list[Message]:
        """One ranged GET, decode, verify against the index row, cache."""
        last_byte = block.byte_offset + block.byte_length - 1
        try:
            data = await self.objects.get_async(block.object_key, block.byte_offset, last_byte)
        except ObjectNotFound as exc:
            raise _ObjectVanished(block) from exc
        except Exception as exc:
            raise ObjectStoreUnavailable(exc) from exc
        if len(data) < INLINE_DECODE_BYTES:
            messages = verified_block(data, topic_id, partition, block)
        else:  # zstd releases the GIL: a big block decodes beside the event loop
            messages = await asyncio.to_thread(verified_block, data, topic_id, partition, block)
        self.cache.put(topic_id, partition, block.base_offset, messages)
        return messages


def verified_block(data: bytes, topic_id: str, partition: int, block: BlockRow) -> list[Message]:
    """Decode a fetched block and check it is the one the index row points at."""
    if len(data) != block.byte_length:
        raise SegmentUnreadable(block, f"got {len(data)} bytes, expected {block.byte_length}")
    try:
        found_topic, found_partition, messages = decode_block(data)
    except SegmentCorrupt as exc:
        raise SegmentUnreadable(block, f"corrupt: {exc}") from exc
    found = (found_topic, found_partition, len(messages))
    if found != (topic_id, partition, block.count):
        raise SegmentUnreadable(
            block,
            f"holds {found[2]} messages of ({found_topic!r}, {found_partition}), "
            f"index expects {block.count} of ({topic_id!r}, {partition})",
        )
    return messages


def _slice(
    blocks: Sequence[BlockRow], decoded: Sequence[Sequence[Message]], start: int, end: int
) -> list[StoredMessage]:
    """The messages with offsets in ``start``..``end - 1``, stopping at any gap in the index."""
    result: list[StoredMessage] = []
    expected = start
    for block, messages in zip(blocks, decoded, strict=True):
        if block.base_offset > expected:
            break  # never happens with a consistent index; never skip offsets silently
        first = max(start, block.base_offset)
        last = min(end, block.base_offset + block.count)
        result += [
            StoredMessage(offset, messages[offset - block.base_offset])
            for offset in range(first, last)
        ]
        expected = last
        if expected >= end:
            break
    return result


def _run(
    blocks: Sequence[BlockRow], decoded: Sequence[Sequence[Message]], start: int, end: int
) -> list[Message]:
    """Like :func:`_slice`, as one list of messages whose offsets are ``start, start + 1, …``."""
    run: list[Message] = []
    expected = start
    for block, messages in zip(blocks, decoded, strict=True):
        if block.base_offset > expected or expected >= end:
            break
        last = min(end, block.base_offset + block.count)
        if last <= expected:
            continue
        run += messages[expected - block.base_offset : last - block.base_offset]
        expected = last
    return run


async def browse(
    conn: Conn,
    reader: SegmentReader,
    environment_id: str,
    topic: str,
    partition: int,
    offset: int | None,
    limit: int,
) -> tuple[TopicRef, ReadResult]:
    """The message browser: a topic named within the caller's environment, one partition."""
    ref = await find_topic(conn, environment_id, topic)
    if partition >= ref.partitions:
        raise PartitionNotFound(ref.name, partition, ref.partitions)
    return ref, await reader.read(conn, ref.id, partition, offset, limit)
