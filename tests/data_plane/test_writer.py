"""The group-commit writer against the real PostgreSQL and S3: one object per flush, offsets,
the commit hook, failures that commit nothing, deleted topics and the cross-replica
idempotency race.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

import pytest

from core import settings
from core.db import async_pool, connect
from core.object_store import S3ObjectStore
from core.settings import SettingsError, WriterSettings
from data_plane.errors import PublishUnavailable, TopicNotFound
from data_plane.topics import service as topic_service
from data_plane.write import writer as writer_module
from data_plane.write.segment import Message, decode_segment
from data_plane.write.writer import CommittedBlock, Entry, Placement, SegmentWriter, TopicTarget
from tests.support.services import Services
from tests.support.tenancy import new_organisation, run_in_tx

T = TypeVar("T")
NOW_MS = time.time_ns() // 1_000_000
FAST = WriterSettings(linger_ms=30, standard_linger_ms=30, max_segment_bytes=8 * 1024 * 1024)


def test_writer_settings_defaults_and_bad_values() -> None:
    defaults = WriterSettings.from_env({})
    assert (defaults.linger_ms, defaults.standard_linger_ms) == (0, 150)
    assert defaults.max_segment_bytes == 8 * 1024 * 1024
    custom = WriterSettings.from_env(
        {"QUEUECORE_WRITER_LINGER_MS": "5", "QUEUECORE_WRITER_MAX_SEGMENT_BYTES": "1048576"}
    )
    assert (custom.linger_ms, custom.max_segment_bytes) == (5, 1_048_576)
    bad = [
        ({"QUEUECORE_WRITER_LINGER_MS": "soon"}, "QUEUECORE_WRITER_LINGER_MS"),
        ({"QUEUECORE_WRITER_LINGER_MS": "-1"}, "QUEUECORE_WRITER_LINGER_MS"),
        ({"QUEUECORE_WRITER_MAX_SEGMENT_BYTES": "10"}, "QUEUECORE_WRITER_MAX_SEGMENT_BYTES"),
        (
            {"QUEUECORE_WRITER_LINGER_MS": "50", "QUEUECORE_WRITER_STANDARD_LINGER_MS": "10"},
            "QUEUECORE_WRITER_STANDARD_LINGER_MS",
        ),
    ]
    for env, variable in bad:
        with pytest.raises(SettingsError) as caught:
            WriterSettings.from_env(env)
        assert caught.value.variable == variable


def new_topic(database_url: str, partitions: int = 2, **options: Any) -> TopicTarget:
    org = new_organisation(database_url, tier="pro")
    env = org.project.environment("production")
    topic = run_in_tx(
        database_url,
        lambda conn: topic_service.create_topic(
            conn,
            org.organisation.id,
            env.id,
            f"w.{uuid.uuid4().hex[:10]}",
            partitions=partitions,
            **options,
        ),
    )
    return TopicTarget(topic.id, topic.name, topic.latency_class, topic.retention_s)


def entries(count: int, partition: int, tag: str, key: str | None = None) -> list[Entry]:
    return [
        Entry(
            partition,
            Message(None, {"n": str(i)}, f'"{tag}-{i}"'.encode(), NOW_MS + i),
            key,
        )
        for i in range(count)
    ]


def with_writer(
    work: Callable[[SegmentWriter], Awaitable[T]],
    listeners: list[Callable[[list[CommittedBlock]], None]] | None = None,
    config: WriterSettings = FAST,
) -> T:
    """Run ``work`` against a started writer on a real pool and bucket, then close it."""

    async def run() -> T:
        pool = async_pool(settings.database(), "test-writer")
        await pool.open(wait=True)
        objects = S3ObjectStore.from_settings(settings.object_store())
        writer = SegmentWriter(pool, objects, config, on_committed=listeners or ())
        await writer.start()
        try:
            return await work(writer)
        finally:
            await writer.close()
            await pool.close()

    return asyncio.run(run())


def index_rows(database_url: str, topic_id: str) -> list[dict[str, Any]]:
    with connect(database_url) as conn:
        return conn.execute(
            "SELECT partition, base_offset, count, object_key FROM segment_blocks"
            " WHERE topic_id = %s ORDER BY partition, base_offset",
            (topic_id,),
        ).fetchall()


def next_offsets(database_url: str, topic_id: str) -> dict[int, int]:
    with connect(database_url) as conn:
        rows = conn.execute(
            "SELECT partition, next_offset FROM partitions WHERE topic_id = %s", (topic_id,)
        ).fetchall()
    return {row["partition"]: row["next_offset"] for row in rows}


def test_concurrent_writes_share_one_object_and_get_consecutive_offsets(
    services: Services,
) -> None:
    first, second = new_topic(services.database_url), new_topic(services.database_url, 1)
    committed: list[CommittedBlock] = []

    async def work(writer: SegmentWriter) -> list[list[Placement]]:
        writes = [writer.write(first, entries(3, i % 2, f"a{i}")) for i in range(10)]
        writes += [writer.write(second, entries(2, 0, f"b{i}")) for i in range(5)]
        return await asyncio.gather(*writes)

    results = with_writer(work, [committed.extend])
    for placements in results:
        offsets = [p.offset for p in placements]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
    first_rows = index_rows(services.database_url, first.id)
    second_rows = index_rows(services.database_url, second.id)
    assert [(r["partition"], r["base_offset"], r["count"]) for r in first_rows] == [
        (0, 0, 15),
        (1, 0, 15),
    ]
    assert [(r["partition"], r["base_offset"], r["count"]) for r in second_rows] == [(0, 0, 10)]
    keys = {r["object_key"] for r in first_rows + second_rows}
    assert len(keys) == 1  # one flush, one object, for every tenant and topic
    segment = decode_segment(S3ObjectStore.from_settings(settings.object_store()).get(keys.pop()))
    assert len(segment[(second.id, 0)]) == 10
    assert next_offsets(services.database_url, first.id) == {0: 15, 1: 15}
    hooked = {(b.topic_id, b.partition): b for b in committed}
    assert set(hooked) == {(first.id, 0), (first.id, 1), (second.id, 0)}
    assert hooked[(second.id, 0)].messages == segment[(second.id, 0)]
    assert hooked[(second.id, 0)].base_offset == 0


def test_a_failed_commit_is_503_and_leaves_no_offsets_or_index_rows(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = new_topic(services.database_url)
    taken = f"segments/test/{uuid.uuid4().hex}.seg"
    with connect(services.database_url) as conn:
        conn.execute(
            "INSERT INTO segment_objects (object_key, size_bytes, block_count) VALUES (%s, 1, 1)",
            (taken,),
        )
    # The flush's own object key is already committed: its transaction fails after reserving.
    monkeypatch.setattr(writer_module, "segment_key", lambda: taken)

    async def work(writer: SegmentWriter) -> BaseException | None:
        try:
            await writer.write(topic, entries(4, 0, "x", key=None))
        except PublishUnavailable as exc:
            return exc
        return None

    failure = with_writer(work)
    assert isinstance(failure, PublishUnavailable)
    assert failure.code == "SERVICE_UNAVAILABLE"
    assert next_offsets(services.database_url, topic.id) == {0: 0, 1: 0}
    assert index_rows(services.database_url, topic.id) == []
    monkeypatch.undo()
    placements = with_writer(lambda writer: writer.write(topic, entries(4, 0, "y")))
    assert [p.offset for p in placements] == [0, 1, 2, 3]


def test_a_topic_deleted_before_commit_fails_alone(services: Services) -> None:
    alive, doomed = new_topic(services.database_url), new_topic(services.database_url)
    with connect(services.database_url) as conn:
        conn.execute("UPDATE topics SET status = 'deleting' WHERE id = %s", (doomed.id,))

    async def work(writer: SegmentWriter) -> list[Any]:
        return await asyncio.gather(
            writer.write(alive, entries(2, 1, "ok")),
            writer.write(doomed, entries(2, 1, "gone")),
            return_exceptions=True,
        )

    kept, refused = with_writer(work)
    assert [p.offset for p in kept] == [0, 1]
    assert isinstance(refused, TopicNotFound)
    assert doomed.name in refused.message
    assert index_rows(services.database_url, doomed.id) == []
    assert next_offsets(services.database_url, doomed.id) == {0: 0, 1: 0}


def test_two_writers_racing_on_one_idempotency_key_store_it_once(services: Services) -> None:
    topic = new_topic(services.database_url, partitions=1)

    async def race(writer: SegmentWriter) -> list[list[Placement]]:
        pool = async_pool(settings.database(), "test-writer-2")
        await pool.open(wait=True)
        other = SegmentWriter(pool, S3ObjectStore.from_settings(settings.object_store()), FAST)
        await other.start()
        try:
            return await asyncio.gather(
                writer.write(topic, entries(1, 0, "one", key="pay-1") + entries(1, 0, "a")),
                other.write(topic, entries(1, 0, "two", key="pay-1") + entries(1, 0, "b")),
            )
        finally:
            await other.close()
            await pool.close()

    first, second = with_writer(race)
    assert first[0] == second[0]  # the loser is answered with the winner's placement
    assert {first[1].offset, second[1].offset, first[0].offset} == {0, 1, 2}
    assert next_offsets(services.database_url, topic.id) == {0: 3}
    with connect(services.database_url) as conn:
        keys = conn.execute(
            'SELECT partition, "offset" FROM idempotency_keys WHERE topic_id = %s', (topic.id,)
        ).fetchall()
    assert keys == [{"partition": 0, "offset": first[0].offset}]


class SlowPuts:
    """The real object store, with the first ``slow`` PUTs held for ``delay_s`` (a slow S3)."""

    def __init__(self, real: Any, delay_s: float, slow: int = 1_000_000) -> None:
        self.real = real
        self.delay_s = delay_s
        self.slow = slow
        self.keys: list[str] = []

    async def put_async(self, key: str, data: bytes) -> None:
        self.keys.append(key)
        if len(self.keys) <= self.slow:
            await asyncio.sleep(self.delay_s)
        await self.real.put_async(key, data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


IDLE_AT_ONCE = WriterSettings(linger_ms=0, standard_linger_ms=150, max_segment_bytes=8 << 20)


def test_publishes_arriving_during_a_flush_share_the_next_one(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_module, "OVERLAP_AFTER_S", 5.0)
    topic = new_topic(services.database_url, partitions=1)

    async def work(writer: SegmentWriter) -> list[list[Placement]]:
        writer.objects = SlowPuts(writer.objects, delay_s=0.6)
        first = asyncio.ensure_future(writer.write(topic, entries(1, 0, "first")))
        later = []
        for i in range(3):  # one by one, while the first flush is in flight
            await asyncio.sleep(0.05)
            later.append(asyncio.ensure_future(writer.write(topic, entries(1, 0, f"later{i}"))))
        return [await first, *await asyncio.gather(*later)]

    results = with_writer(work, config=IDLE_AT_ONCE)
    assert [p.offset for placements in results for p in placements] == [0, 1, 2, 3]
    rows = index_rows(services.database_url, topic.id)
    # The idle writer flushed the first publish alone, at once; the three that came while it
    # was in flight waited for it and went together in one more object.
    assert [(r["base_offset"], r["count"]) for r in rows] == [(0, 1), (1, 3)]


def test_express_flushes_at_once_when_idle_and_at_most_once_per_linger_when_busy(
    services: Services,
) -> None:
    topic = new_topic(services.database_url, partitions=1)
    linger_s = 2.0  # far longer than any PUT and commit, so the two cases cannot be confused
    config = WriterSettings(
        linger_ms=int(linger_s * 1000), standard_linger_ms=2000, max_segment_bytes=8 << 20
    )

    async def work(writer: SegmentWriter) -> tuple[float, float]:
        started = time.monotonic()
        await writer.write(topic, entries(1, 0, "first"))
        first_s = time.monotonic() - started
        later = []
        for i in range(3):  # right after the first flush: within its linger
            later.append(asyncio.ensure_future(writer.write(topic, entries(1, 0, f"later{i}"))))
            await asyncio.sleep(0.02)
        await asyncio.gather(*later)
        return first_s, time.monotonic() - started

    first_s, later_s = with_writer(work, config=config)
    assert first_s < linger_s  # the idle writer did not wait for company
    assert later_s >= linger_s  # the busy one waited one linger from the last flush's start
    rows = index_rows(services.database_url, topic.id)
    assert [(r["base_offset"], r["count"]) for r in rows] == [(0, 1), (1, 3)]


def test_a_stalled_flush_gets_another_beside_it(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_module, "OVERLAP_AFTER_S", 0.1)
    topic = new_topic(services.database_url, partitions=2)

    async def work(writer: SegmentWriter) -> tuple[bool, list[Placement], list[Placement]]:
        writer.objects = SlowPuts(writer.objects, delay_s=3.0, slow=1)
        stalled = asyncio.ensure_future(writer.write(topic, entries(1, 0, "stalled")))
        await asyncio.sleep(0.02)
        beside = await writer.write(topic, entries(1, 1, "beside"))
        return stalled.done(), beside, await stalled

    stalled_done_first, beside, stalled = with_writer(work, config=IDLE_AT_ONCE)
    assert not stalled_done_first  # the second publish did not wait for the slow PUT
    assert [(p.partition, p.offset) for p in beside + stalled] == [(1, 0), (0, 0)]


def test_a_publish_big_enough_for_its_own_put_does_not_wait_for_one_in_progress(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_module, "OVERLAP_AFTER_S", 5.0)  # only size may start it early
    topic = new_topic(services.database_url, partitions=2)
    big = [
        Entry(1, Message(None, {}, b'"%s"' % (b"x" * 1024), NOW_MS), None)
        for _ in range(writer_module.OVERLAP_MIN_BYTES // 1024)
    ]

    async def work(writer: SegmentWriter) -> tuple[bool, list[Placement], list[Placement]]:
        writer.objects = SlowPuts(writer.objects, delay_s=3.0, slow=1)
        slow = asyncio.ensure_future(writer.write(topic, entries(1, 0, "slow")))
        await asyncio.sleep(0.05)
        beside = await writer.write(topic, big)
        return slow.done(), beside, await slow

    slow_done_first, beside, slow = with_writer(work, config=IDLE_AT_ONCE)
    assert not slow_done_first  # the big batch was answered while the first PUT still ran
    assert [p.offset for p in beside] == list(range(len(big)))
    assert [(p.partition, p.offset) for p in slow] == [(0, 0)]


def test_an_organisation_with_nothing_in_flight_does_not_wait_behind_anothers_big_put(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_module, "OVERLAP_AFTER_S", 5.0)  # only this rule may start it early
    flood = replace(new_topic(services.database_url, partitions=1), organisation_id="flood")
    quiet = replace(new_topic(services.database_url, partitions=1), organisation_id="quiet")
    big = [
        Entry(0, Message(None, {}, b'"%s"' % (b"x" * 1024), NOW_MS), None)
        for _ in range(writer_module.OVERLAP_MIN_BYTES // 1024)
    ]

    async def work(writer: SegmentWriter) -> tuple[bool, bool, list[Placement]]:
        writer.objects = SlowPuts(writer.objects, delay_s=3.0, slow=1)
        slow = asyncio.ensure_future(writer.write(flood, big))
        await asyncio.sleep(0.05)
        more = asyncio.ensure_future(writer.write(flood, entries(1, 0, "more")))
        await asyncio.sleep(0.05)
        placements = await writer.write(quiet, entries(1, 0, "quiet"))
        done_first = (slow.done(), more.done())
        await asyncio.gather(slow, more)
        return *done_first, placements

    slow_done_first, more_done_first, placements = with_writer(work, config=IDLE_AT_ONCE)
    assert not slow_done_first  # the quiet publish was answered while the flood's PUT still ran
    assert not more_done_first  # the flood's own next publish waited behind its PUT
    assert [p.offset for p in placements] == [0]
    quiet_rows = index_rows(services.database_url, quiet.id)
    flood_rows = index_rows(services.database_url, flood.id)
    # The quiet publish's object carried only it: the flood's waiting publish did not ride along.
    assert [(r["base_offset"], r["count"]) for r in quiet_rows] == [(0, 1)]
    assert quiet_rows[0]["object_key"] not in {r["object_key"] for r in flood_rows}
    assert [(r["base_offset"], r["count"]) for r in flood_rows] == [(0, len(big)), (len(big), 1)]


def test_close_flushes_what_is_waiting(services: Services) -> None:
    topic = new_topic(services.database_url, latency_class="standard")
    slow = WriterSettings(linger_ms=0, standard_linger_ms=10_000, max_segment_bytes=8 * 1024 * 1024)

    async def work(writer: SegmentWriter) -> list[Placement]:
        pending = asyncio.ensure_future(writer.write(topic, entries(3, 0, "late")))
        await asyncio.sleep(0.05)
        assert not pending.done()  # a standard topic waits for company
        await writer.close()
        return await pending

    placements = with_writer(work, config=slow)
    assert [p.offset for p in placements] == [0, 1, 2]
    assert [
        (r["base_offset"], r["count"]) for r in index_rows(services.database_url, topic.id)
    ] == [(0, 3)]
