"""Offset for timestamp over the block index, and the per-topic traffic counts behind the
console's rate charts (real PostgreSQL and S3)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
from psycopg import AsyncConnection
from psycopg.rows import dict_row

from core.db import connect
from data_plane.errors import TopicNotFound
from data_plane.read.reader import PartitionNotFound, SegmentReader
from data_plane.read.seek import offset_for_timestamp, seek_topic
from data_plane.topics.traffic import (
    WINDOWS,
    TrafficCounter,
    TrafficFlusher,
    topic_traffic,
)
from tests.data_plane.stored import SeededTopic, commit_segment, messages, object_store, seed_topic
from tests.support.services import Services

T = TypeVar("T")
A, B, C = 1_000_000, 2_000_000, 3_000_000  # the three blocks' first timestamps (ms)


def run(database_url: str, work: Callable[[Any], Coroutine[Any, Any, T]]) -> T:
    """``work(conn)`` on a fresh async connection, committed."""

    async def go() -> T:
        async with await AsyncConnection.connect(database_url, row_factory=dict_row) as conn:
            result = await work(conn)
            await conn.commit()
            return result

    return asyncio.run(go())


@pytest.fixture
def stamped(services: Services, unique: Callable[[str], str]) -> SeededTopic:
    """Partition 0: offsets 0-2 at A+0..2 ms, 3-6 at B+0..3, 7-11 at C+0..4, one block each."""
    topic = seed_topic(services.database_url, unique("orders.seek"))
    store = object_store()
    for tag, count, start_ms in (("a", 3, A), ("b", 4, B), ("c", 5, C)):
        commit_segment(
            services.database_url, store, {(topic.id, 0): messages(count, tag, start_ms)}
        )
    return topic


@pytest.mark.parametrize(
    ("moment_ms", "offset"),
    [
        (0, 0),  # before everything: the earliest offset
        (A + 1, 1),  # inside the first block
        (A + 500, 3),  # between blocks: the next block's first message
        (B + 2, 5),  # inside a middle block
        (C + 4, 11),  # the last message
        (C + 5, 12),  # after everything: the end of the partition
    ],
)
def test_offset_for_timestamp_finds_the_first_message_at_or_after_the_moment(
    services: Services, stamped: SeededTopic, moment_ms: int, offset: int
) -> None:
    reader = SegmentReader(object_store())
    seek = run(
        services.database_url,
        lambda conn: offset_for_timestamp(conn, reader, stamped.id, 0, moment_ms),
    )
    assert (seek.offset, seek.earliest, seek.latest) == (offset, 0, 12)


def test_offset_for_timestamp_never_answers_an_offset_retention_dropped(
    services: Services, stamped: SeededTopic
) -> None:
    with connect(services.database_url) as conn:
        conn.execute(
            "UPDATE partitions SET start_offset = 4 WHERE topic_id = %s AND partition = 0",
            (stamped.id,),
        )
    reader = SegmentReader(object_store())
    for moment_ms in (0, A + 1, B):
        seek = run(
            services.database_url,
            lambda conn, m=moment_ms: offset_for_timestamp(conn, reader, stamped.id, 0, m),
        )
        assert seek.offset == 4 and seek.earliest == 4


def test_seeking_is_scoped_to_the_environment_and_its_partitions(
    services: Services, stamped: SeededTopic
) -> None:
    reader = SegmentReader(object_store())
    found = run(
        services.database_url,
        lambda conn: seek_topic(conn, reader, stamped.environment_id, stamped.name, 0, B),
    )
    assert found.offset == 3
    other = seed_topic(services.database_url, f"other.{secrets.token_hex(4)}")
    with pytest.raises(TopicNotFound):
        run(
            services.database_url,
            lambda conn: seek_topic(conn, reader, other.environment_id, stamped.name, 0, B),
        )
    with pytest.raises(PartitionNotFound):
        run(
            services.database_url,
            lambda conn: seek_topic(conn, reader, stamped.environment_id, stamped.name, 2, B),
        )


class Block:
    """A committed block as the writer announces it (only what the counter reads)."""

    def __init__(self, topic_id: str, count: int) -> None:
        self.topic_id = topic_id
        self.messages = [None] * count


def pool_of(database_url: str) -> Callable[[], Any]:
    """A ``connect`` for the flusher: one committed connection per flush."""

    @asynccontextmanager
    async def connection() -> AsyncIterator[Any]:
        async with await AsyncConnection.connect(database_url, row_factory=dict_row) as conn:
            yield conn
            await conn.commit()

    return connection


def test_processes_add_their_counts_into_the_same_minutes_and_the_windows_read_them(
    services: Services,
) -> None:
    topic_id = f"top_{secrets.token_hex(8)}"
    now = datetime.now(UTC).replace(second=30, microsecond=0)
    earlier = now - timedelta(minutes=5)
    first, second = TrafficCounter(lambda: now.timestamp()), TrafficCounter(lambda: now.timestamp())
    first.committed([Block(topic_id, 3), Block(topic_id, 4)])
    first.consumed(topic_id, 2)
    second.committed([Block(topic_id, 5)])
    second.consumed(topic_id, 6)
    old = TrafficCounter(lambda: earlier.timestamp())
    old.committed([Block(topic_id, 60)])

    async def flush_all() -> None:
        for counter in (first, second, old):
            assert await TrafficFlusher(counter, pool_of(services.database_url), 60).flush() == 1

    asyncio.run(flush_all())
    hour = run(
        services.database_url, lambda conn: topic_traffic(conn, topic_id, WINDOWS["hour"], now)
    )
    assert len(hour.points) == 60 and (hour.published, hour.consumed) == (72, 8)
    assert hour.points[-1].at == now.replace(second=0)
    assert (hour.points[-1].published, hour.points[-1].consumed) == (12, 8)
    assert hour.points[-6].published == 60 and hour.points[-6].publish_rate == 1.0
    day = run(
        services.database_url, lambda conn: topic_traffic(conn, topic_id, WINDOWS["day"], now)
    )
    assert len(day.points) == 96 and (day.published, day.consumed) == (72, 8)


def test_a_failed_flush_keeps_its_counts_and_old_rows_are_purged(services: Services) -> None:
    topic_id = f"top_{secrets.token_hex(8)}"
    with connect(services.database_url) as conn:
        conn.execute(
            "INSERT INTO topic_traffic (topic_id, minute, published) VALUES (%s, %s, 9)",
            (topic_id, datetime.now(UTC) - timedelta(days=3)),
        )
    counter = TrafficCounter()
    counter.committed([Block(topic_id, 4)])

    @asynccontextmanager
    async def unreachable() -> AsyncIterator[Any]:
        raise ConnectionError("database down")
        yield

    async def flushes() -> None:
        with pytest.raises(ConnectionError):
            await TrafficFlusher(counter, unreachable, 60).flush()
        counter.consumed(topic_id, 1)
        assert await TrafficFlusher(counter, pool_of(services.database_url), 60).flush() == 1

    asyncio.run(flushes())
    with connect(services.database_url) as conn:
        rows = conn.execute(
            "SELECT published, consumed FROM topic_traffic WHERE topic_id = %s", (topic_id,)
        ).fetchall()
    assert rows == [{"published": 4, "consumed": 1}]  # the 3-day-old row is gone
    assert counter.take() == []
