"""Offset for timestamp: the first offset of a partition whose message was published at or after
a moment, found through the block index's timestamps and one block read.

``segment_blocks`` keeps each block's smallest and largest publish timestamp. The first block
whose largest timestamp reaches the moment holds the answer (publish timestamps are taken by
the API process as it accepts a message, so they rise with offsets up to clock differences
between processes); its messages are read (usually from the block cache) to find the first one
at or after the moment. A moment after every retained message is the end of the partition.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.db import Conn
from data_plane.read import queries as q
from data_plane.read.reader import (
    PartitionNotFound,
    SegmentReader,
    find_topic,
    partition_bounds,
)


@dataclass(frozen=True, slots=True)
class Seek:
    """Where a moment falls in a partition."""

    offset: int  # the first message at or after the moment (``latest`` when there is none)
    earliest: int
    latest: int


async def offset_for_timestamp(
    conn: Conn, reader: SegmentReader, topic_id: str, partition: int, timestamp_ms: int
) -> Seek:
    """The first retained offset published at or after ``timestamp_ms``."""
    bounds = await partition_bounds(conn, topic_id, partition)
    params = {
        "topic_id": topic_id,
        "partition": partition,
        "earliest": bounds.earliest,
        "timestamp_ms": timestamp_ms,
    }
    row = await (await conn.execute(q.SELECT_FIRST_BLOCK_AT, params)).fetchone()
    if row is None:
        return Seek(bounds.latest, bounds.earliest, bounds.latest)
    start = max(row["base_offset"], bounds.earliest)
    end = row["base_offset"] + row["count"]
    result = await reader.read(conn, topic_id, partition, start, end - start)
    for stored in result.messages:
        if stored.message.timestamp_ms >= timestamp_ms:
            return Seek(stored.offset, result.earliest_offset, result.latest_offset)
    return Seek(end, result.earliest_offset, result.latest_offset)  # not reached: max says so


async def seek_topic(
    conn: Conn,
    reader: SegmentReader,
    environment_id: str,
    topic: str,
    partition: int,
    timestamp_ms: int,
) -> Seek:
    """:func:`offset_for_timestamp` of a topic named within the caller's environment."""
    ref = await find_topic(conn, environment_id, topic)
    if partition >= ref.partitions:
        raise PartitionNotFound(ref.name, partition, ref.partitions)
    return await offset_for_timestamp(conn, reader, ref.id, partition, timestamp_ms)
