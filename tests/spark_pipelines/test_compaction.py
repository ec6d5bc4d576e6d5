"""Segment compaction on a real local SparkSession, PostgreSQL and S3 bucket."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import pytest
from litestar.testing import TestClient
from psycopg import AsyncConnection
from psycopg.rows import dict_row

from core import settings
from core.db import connect
from data_plane.maintenance.cleanup import apply_retention, collect_orphans
from data_plane.read.cache import BlockCache
from data_plane.read.reader import SegmentReader
from data_plane.write.segment import Message, decode_segment
from tests.data_plane.stored import (
    SeededTopic,
    commit_segment,
    exists,
    messages,
    object_store,
    seed_topic,
)
from tests.data_plane.test_consume_api import Group
from tests.support.services import Services
from tests.support.tenancy import new_organisation

HOUR_S = 3600
GRACE_S = HOUR_S
Read = list[tuple[int, bytes | None, list[tuple[str, str]], bytes, int]]
Block = tuple[int, int, int, str]  # partition, base offset, count, object key


@pytest.fixture(scope="module")
def job(spark: Any) -> ModuleType:
    """The job module (imported once the session fixture has found PySpark and Java)."""
    from spark_pipelines import compaction

    return compaction


@pytest.fixture
def compact(job: ModuleType, spark: Any, services: Services) -> Callable[..., Any]:
    """Run the job over ``topics`` only (other tests' data is not ours to merge)."""

    def _run(*topics: SeededTopic | str, **config: int) -> Any:
        settings_ = job.CompactionSettings(
            **{"min_age_s": 600, "small_object_bytes": 1 << 20, "target_bytes": 1 << 20, **config}
        )
        ids = [t if isinstance(t, str) else t.id for t in topics]
        return job.run(
            spark, services.database_url, settings.object_store(), settings_, GRACE_S, ids
        )

    return _run


def varied(count: int, tag: str) -> list[Message]:
    """Messages with and without keys and headers, binary values, unordered timestamps."""
    base = messages(count, tag)
    return [
        Message(
            key=None if i % 3 == 0 else m.key,
            headers={} if i % 4 == 0 else {"z": tag, "a": f"{i}"},
            value=m.value + bytes([0, 255, i % 256]),
            timestamp_ms=m.timestamp_ms - (i % 2) * 7,
        )
        for i, m in enumerate(base)
    ]


def read_all(url: str, topic_id: str, partition: int) -> Read:
    """Every retained message of the partition through the real read path, cold cache."""

    async def _read() -> Read:
        reader = SegmentReader(object_store(), BlockCache())
        async with await AsyncConnection.connect(url, row_factory=dict_row) as conn:
            result = await reader.read(conn, topic_id, partition, None, 100_000)
        return [
            (s.offset, s.message.key, list(s.message.headers.items()), s.message.value,
             s.message.timestamp_ms)
            for s in result.messages
        ]  # fmt: skip

    return asyncio.run(_read())


def blocks_of(url: str, topic_id: str) -> list[Block]:
    with connect(url) as conn:
        rows = conn.execute(
            "SELECT partition, base_offset, count, object_key FROM segment_blocks"
            " WHERE topic_id = %s ORDER BY partition, base_offset",
            (topic_id,),
        ).fetchall()
    return [(r["partition"], r["base_offset"], r["count"], r["object_key"]) for r in rows]


def age(url: str, keys: Sequence[str], seconds: int = HOUR_S, objects: bool = False) -> None:
    """Make the blocks of ``keys`` (and, if asked, the objects) ``seconds`` old."""
    with connect(url) as conn:
        conn.execute(
            "UPDATE segment_blocks SET created_at = now() - make_interval(secs => %s)"
            " WHERE object_key = ANY(%s)",
            (seconds, list(keys)),
        )
        if objects:
            conn.execute(
                "UPDATE segment_objects SET created_at = now() - make_interval(secs => %s)"
                " WHERE object_key = ANY(%s)",
                (seconds, list(keys)),
            )


def object_rows(url: str, keys: Sequence[str]) -> int:
    with connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) AS n FROM segment_objects WHERE object_key = ANY(%s)", (list(keys),)
        ).fetchone()
    assert row is not None
    return int(row["n"])


def gc(url: str, grace_s: int = GRACE_S) -> None:
    async def _gc() -> None:
        async with await AsyncConnection.connect(
            url, autocommit=True, row_factory=dict_row
        ) as conn:
            await collect_orphans(conn, object_store(), grace_s)

    asyncio.run(_gc())


def test_compaction_merges_old_multi_tenant_segments_and_reads_stay_byte_identical(
    services: Services, unique: Callable[[str], str], compact: Callable[..., Any]
) -> None:
    url, store = services.database_url, object_store()
    orders = seed_topic(url, unique("orders.compact"), partitions=2)
    clicks = seed_topic(url, unique("clicks.compact"), partitions=3)
    parts = [(orders, p) for p in range(2)] + [(clicks, p) for p in range(3)]
    flushes = [
        commit_segment(url, store, {(t.id, p): varied(3 + n + p, f"{n}-{p}") for t, p in parts})
        for n in range(8)
    ]
    old, young = flushes[:6], flushes[6:]
    age(url, old)
    before = {(t.id, p): read_all(url, t.id, p) for t, p in parts}
    blocks_before = {t.id: blocks_of(url, t.id) for t in (orders, clicks)}

    report = compact(orders, clicks)

    assert report.as_dict()["swapped"] == 5 and report.failed == report.aborted == 0
    assert report.blocks_merged == 5 * 6
    for topic, partition in parts:
        assert read_all(url, topic.id, partition) == before[(topic.id, partition)]
    for topic in (orders, clicks):
        after = blocks_of(url, topic.id)
        assert len(after) == topic.partitions * 3  # six old blocks became one, per partition
        for partition in range(topic.partitions):
            first, *rest = [b for b in after if b[0] == partition]
            assert first[3].startswith("segments/compacted/")
            old_blocks = [b for b in blocks_before[topic.id] if b[0] == partition][:6]
            assert first[1:3] == (0, sum(b[2] for b in old_blocks))
            # The blocks newer than the minimum age are untouched.
            assert rest == [b for b in blocks_before[topic.id] if b[0] == partition][6:]
            assert {b[3] for b in rest} == set(young)
    compacted = {b[3] for t in (orders, clicks) for b in blocks_of(url, t.id)} - set(young)
    assert len(compacted) == 5  # one per partition, each holding that partition only
    assert object_rows(url, old) == 6  # kept until the GC's grace period has passed

    blocks_after = {t.id: blocks_of(url, t.id) for t in (orders, clicks)}
    again = compact(orders, clicks)
    assert (again.runs, again.swapped) == (0, 0)
    assert {t.id: blocks_of(url, t.id) for t in (orders, clicks)} == blocks_after
    assert {(t.id, p): read_all(url, t.id, p) for t, p in parts} == before


def test_output_objects_are_bounded_by_the_target_size(
    services: Services, unique: Callable[[str], str], compact: Callable[..., Any]
) -> None:
    url, store = services.database_url, object_store()
    topic = seed_topic(url, unique("bounded.compact"), partitions=1)
    keys = [commit_segment(url, store, {(topic.id, 0): varied(20, f"b{n}")}) for n in range(6)]
    age(url, keys)
    before, sizes = read_all(url, topic.id, 0), blocks_of(url, topic.id)
    with connect(url) as conn:
        row = conn.execute(
            "SELECT max(byte_length) AS m FROM segment_blocks WHERE topic_id = %s", (topic.id,)
        ).fetchone()
    assert row is not None and len(sizes) == 6

    report = compact(topic, target_bytes=2 * row["m"] + 1)

    assert report.swapped == 3 and report.blocks_merged == 6
    after = blocks_of(url, topic.id)
    assert [(b[1], b[2]) for b in after] == [(0, 40), (40, 40), (80, 40)]
    assert len({b[3] for b in after}) == 3
    assert read_all(url, topic.id, 0) == before


def test_swap_aborts_when_retention_dropped_a_block_meanwhile(
    services: Services, unique: Callable[[str], str], job: ModuleType, spark: Any
) -> None:
    url, store = services.database_url, object_store()
    topic = seed_topic(url, unique("retained.compact"), partitions=1, retention_s=HOUR_S)
    expired = int(time.time() * 1000) - 2 * HOUR_S * 1000
    keys = [commit_segment(url, store, {(topic.id, 0): messages(3, "old", expired)})]
    keys += [commit_segment(url, store, {(topic.id, 0): varied(4, f"n{n}")}) for n in range(3)]
    age(url, keys)
    before = read_all(url, topic.id, 0)
    config = job.CompactionSettings(min_age_s=600, small_object_bytes=1 << 20)
    with connect(url, autocommit=True) as conn:
        runs = job.plan(conn, config, [topic.id])
    assert [len(r.blocks) for r in runs] == [4]
    (result,) = job.compact(spark, settings.object_store(), runs)
    assert result.error is None and exists(store, result.object_key)

    async def retention() -> None:  # the real retention task's service, between read and swap
        async with await AsyncConnection.connect(
            url, autocommit=True, row_factory=dict_row
        ) as conn:
            await apply_retention(conn, store)

    asyncio.run(retention())
    with connect(url, autocommit=True) as conn:
        assert job.swap(conn, result, GRACE_S / 2) is False

    assert [b[3] for b in blocks_of(url, topic.id)] == keys[1:]  # retention's drop only
    assert read_all(url, topic.id, 0) == before[3:]
    assert object_rows(url, [result.object_key]) == 0  # an orphan for the GC, never indexed
    assert exists(store, result.object_key)


def test_concurrent_compactions_swap_once_and_the_loser_leaves_an_orphan(
    services: Services, unique: Callable[[str], str], job: ModuleType, spark: Any
) -> None:
    url, store = services.database_url, object_store()
    topic = seed_topic(url, unique("race.compact"), partitions=1)
    keys = [commit_segment(url, store, {(topic.id, 0): varied(5, f"r{n}")}) for n in range(4)]
    age(url, keys)
    before = read_all(url, topic.id, 0)
    with connect(url, autocommit=True) as conn:
        runs = job.plan(conn, job.CompactionSettings(min_age_s=600), [topic.id])
    first, second = job.compact(spark, settings.object_store(), runs + runs)

    with connect(url, autocommit=True) as conn:
        assert job.swap(conn, first, GRACE_S / 2) is True
        assert job.swap(conn, second, GRACE_S / 2) is False
        stale = job.Compacted(runs[0], "segments/compacted/x.seg", 1, first.block, 0.0)
        assert job.swap(conn, stale, GRACE_S / 2) is False  # PUT too long ago: GC may have it

    assert blocks_of(url, topic.id) == [(0, 0, 20, first.object_key)]
    assert object_rows(url, [second.object_key]) == 0
    assert read_all(url, topic.id, 0) == before


def test_old_objects_outlive_the_swap_by_the_gc_grace_period_then_are_collected(
    services: Services, unique: Callable[[str], str], compact: Callable[..., Any]
) -> None:
    url, store = services.database_url, object_store()
    topic = seed_topic(url, unique("gc.compact"), partitions=1)
    keys = [commit_segment(url, store, {(topic.id, 0): varied(4, f"g{n}")}) for n in range(4)]
    age(url, keys, 2 * HOUR_S, objects=True)  # committed long before the grace period
    old_rows = blocks_of(url, topic.id)
    before = read_all(url, topic.id, 0)

    assert compact(topic).swapped == 1
    gc(url)

    # A reader that looked the old rows up just before the swap still gets its blocks.
    assert all(exists(store, k) for k in keys)
    assert object_rows(url, keys) == 4
    _, base, count, key = old_rows[1]
    (old_messages,) = decode_segment(store.get(key)).values()
    assert [(m.key, m.value) for m in old_messages] == [
        (r[1], r[3]) for r in before[base : base + count]
    ]

    with connect(url) as conn:  # the grace period passes
        conn.execute(
            "UPDATE segment_objects SET released_at = now() - make_interval(secs => %s)"
            " WHERE object_key = ANY(%s)",
            (2 * HOUR_S, keys),
        )
    gc(url)

    assert not any(exists(store, k) for k in keys)
    assert object_rows(url, keys) == 0
    (new,) = {b[3] for b in blocks_of(url, topic.id)}
    assert exists(store, new)
    assert read_all(url, topic.id, 0) == before


def test_retention_emptying_a_compacted_object_leaves_it_to_the_gc_grace_period(
    services: Services, unique: Callable[[str], str], compact: Callable[..., Any]
) -> None:
    url, store = services.database_url, object_store()
    topic = seed_topic(url, unique("shared.compact"), partitions=2, retention_s=HOUR_S)
    expired = int(time.time() * 1000) - 2 * HOUR_S * 1000
    shared = commit_segment(
        url, store, {(topic.id, 0): messages(2, "old", expired), (topic.id, 1): varied(3, "s")}
    )
    keys = [shared, commit_segment(url, store, {(topic.id, 1): varied(3, "t")})]
    age(url, keys)
    assert compact(topic).swapped == 1  # partition 1's two blocks; partition 0 has one

    async def retention() -> None:  # drops partition 0's block, the last one in ``shared``
        async with await AsyncConnection.connect(
            url, autocommit=True, row_factory=dict_row
        ) as conn:
            await apply_retention(conn, store)

    asyncio.run(retention())

    assert [b[0] for b in blocks_of(url, topic.id)] == [1]
    assert exists(store, shared)  # a reader of partition 1 may still be reading it
    assert object_rows(url, [shared]) == 1


def test_blocks_newer_than_the_minimum_age_are_left_alone(
    services: Services, unique: Callable[[str], str], compact: Callable[..., Any]
) -> None:
    url, store = services.database_url, object_store()
    topic = seed_topic(url, unique("young.compact"), partitions=1)
    keys = [commit_segment(url, store, {(topic.id, 0): varied(3, f"y{n}")}) for n in range(4)]
    age(url, keys[:1])  # one old block has no old neighbour to merge with
    before = blocks_of(url, topic.id)

    report = compact(topic)

    assert report.runs == 0 and report.swapped == 0
    assert blocks_of(url, topic.id) == before


def test_a_consumer_group_keeps_consuming_across_the_swap(
    client: TestClient,
    services: Services,
    unique: Callable[[str], str],
    compact: Callable[..., Any],
) -> None:
    url = services.database_url
    group = Group(client, new_organisation(url, tier="pro"), unique)
    for batch in range(6):
        group.publish(*({"batch": batch, "n": n} for n in range(5)))
    with connect(url) as conn:
        row = conn.execute(
            "SELECT id FROM topics WHERE name = %s AND status = 'active'", (group.topic,)
        ).fetchone()
    assert row is not None
    topic_id = row["id"]
    keys = [b[3] for b in blocks_of(url, topic_id)]
    assert len(keys) >= 2
    member = group.join()
    done = group.pull(member, max_messages=12)
    assert group.ack(*(m["ackId"] for m in done)).json()["acked"]
    in_flight = group.pull(member, max_messages=3)
    assert group.offsets() == {"current": 12, "latest": 30, "lag": 18}

    age(url, keys)
    assert compact(topic_id).swapped == 1
    assert len(blocks_of(url, topic_id)) == 1

    assert group.offsets() == {"current": 12, "latest": 30, "lag": 18}
    assert group.ack(*(m["ackId"] for m in in_flight)).json()["acked"]
    rest = group.pull(member, max_messages=100)
    assert group.ack(*(m["ackId"] for m in rest)).json()["acked"]
    delivered = done + in_flight + rest
    assert [m["offset"] for m in delivered] == list(range(30))
    assert [m["data"] for m in delivered] == [
        {"batch": b, "n": n} for b in range(6) for n in range(5)
    ]
    assert group.offsets() == {"current": 30, "latest": 30, "lag": 0}
    assert group.pull(member) == []


def test_the_celery_task_runs_the_job_in_a_child_process(
    services: Services, unique: Callable[[str], str], job: ModuleType
) -> None:
    from spark_pipelines import tasks

    url, store = services.database_url, object_store()
    topic = seed_topic(url, unique("task.compact"), partitions=1)
    keys = [commit_segment(url, store, {(topic.id, 0): varied(3, f"c{n}")}) for n in range(3)]
    age(url, keys)
    before = read_all(url, topic.id, 0)

    report = tasks.run_compaction(min_age_s=600, topic_ids=[topic.id])

    assert report["swapped"] == 1 and report["blocksMerged"] == 3
    assert [b[1:3] for b in blocks_of(url, topic.id)] == [(0, 9)]
    assert read_all(url, topic.id, 0) == before
    assert tasks.run_compaction(min_age_s=10**9) == {"skipped": "nothing to compact"}
