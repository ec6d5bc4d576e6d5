"""Unknown publish outcomes: a commit whose reply was lost is resolved, never guessed.

The real PostgreSQL and S3, with :class:`LostReplyPool` dropping the connection of the writer's
commit statement after it ran (it landed) or before (it did not).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import pytest
import structlog
from litestar.testing import TestClient

from core import settings
from core.db import async_pool, connect
from core.object_store import S3ObjectStore
from core.settings import WriterSettings
from data_plane.errors import PublishOutcomeUnknown, PublishUnavailable
from data_plane.write.writer import SegmentWriter
from tests.data_plane.test_writer import entries, index_rows, new_topic, next_offsets
from tests.support.db_faults import LostReplyPool
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation

T = TypeVar("T")
RESOLVING = WriterSettings(
    linger_ms=0, standard_linger_ms=30, max_segment_bytes=8 << 20, resolve_ms=2_000
)


def with_faulty_writer(work: Callable[[SegmentWriter, LostReplyPool], Awaitable[T]]) -> T:
    """Run ``work`` against a writer whose pool can lose its commit's reply."""

    async def run() -> T:
        real = async_pool(settings.database(), "test-outcomes")
        await real.open(wait=True)
        pool = LostReplyPool(real)
        objects = S3ObjectStore.from_settings(settings.object_store())
        writer = SegmentWriter(cast(Any, pool), objects, RESOLVING)
        await writer.start()
        try:
            return await work(writer, pool)
        finally:
            await writer.close()
            await real.close()

    return asyncio.run(run())


def test_a_commit_that_landed_but_lost_its_reply_is_answered_with_its_offsets(
    services: Services,
) -> None:
    topic = new_topic(services.database_url, partitions=1)

    async def work(writer: SegmentWriter, pool: LostReplyPool) -> list[Any]:
        pool.lose_next_reply("after")
        return await writer.write(topic, entries(3, 0, "landed"))

    placements = with_faulty_writer(work)
    assert [p.offset for p in placements] == [0, 1, 2]  # not "nothing was written"
    assert [
        (r["base_offset"], r["count"]) for r in index_rows(services.database_url, topic.id)
    ] == [(0, 3)]


def test_a_commit_that_never_ran_is_certainly_not_written(services: Services) -> None:
    topic = new_topic(services.database_url, partitions=1)

    async def work(writer: SegmentWriter, pool: LostReplyPool) -> BaseException | None:
        pool.lose_next_reply("before")
        try:
            await writer.write(topic, entries(2, 0, "lost"))
        except PublishUnavailable as exc:
            return exc
        return None

    failure = with_faulty_writer(work)
    assert isinstance(failure, PublishUnavailable)
    assert failure.code == "SERVICE_UNAVAILABLE"
    assert "nothing was written" in failure.message
    assert index_rows(services.database_url, topic.id) == []
    assert next_offsets(services.database_url, topic.id) == {0: 0}


def test_a_lost_reply_with_the_database_gone_is_an_unknown_outcome_resolvable_by_key(
    services: Services,
) -> None:
    topic = new_topic(services.database_url, partitions=1, delivery="at-least-once")
    key = f"order-{uuid.uuid4().hex}"

    async def work(writer: SegmentWriter, pool: LostReplyPool) -> BaseException | None:
        pool.lose_next_reply("after", then_unreachable=True)
        try:
            await writer.write(topic, entries(1, 0, "maybe", key=key))
        except PublishOutcomeUnknown as exc:
            return exc
        finally:
            pool.unreachable = False
        return None

    with structlog.testing.capture_logs() as logged:
        unknown = with_faulty_writer(work)
    assert isinstance(unknown, PublishOutcomeUnknown)
    assert unknown.code == "PUBLISH_OUTCOME_UNKNOWN"
    assert [e for e in logged if e["log_level"] == "error"] == []  # its flush was measured
    assert "by-idempotency-key" in unknown.message
    with connect(services.database_url) as conn:
        stored = conn.execute(
            'SELECT partition, "offset" FROM idempotency_keys'
            " WHERE topic_id = %s AND idempotency_key = %s",
            (topic.id, key),
        ).fetchall()
    assert stored == [{"partition": 0, "offset": 0}]  # it had landed: the key says where


@pytest.fixture
def producer(services: Services) -> tuple[dict[str, str], str]:
    org = new_organisation(services.database_url, tier="pro")
    return bearer(org.keys["production"].secret), f"o.{uuid.uuid4().hex[:10]}"


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_a_retry_with_the_same_key_returns_the_original_offset_and_the_key_resolves(
    client: TestClient, producer: tuple[dict[str, str], str], delivery: str
) -> None:
    headers, name = producer
    created = client.post(
        "/v1/topics", json={"name": name, "partitions": 2, "delivery": delivery}, headers=headers
    )
    assert created.status_code == 201, created.text
    body = {"data": {"n": 1}, "idempotencyKey": "pay-42"}
    first = client.post(f"/v1/topics/{name}/messages", json=body, headers=headers)
    again = client.post(f"/v1/topics/{name}/messages", json=body, headers=headers)
    assert first.status_code == again.status_code == 201, again.text
    assert again.json()["offset"] == first.json()["offset"]
    assert again.json()["messageId"] == first.json()["messageId"]
    found = client.get(f"/v1/topics/{name}/messages/by-idempotency-key/pay-42", headers=headers)
    assert found.status_code == 200, found.text
    assert found.json()["offset"] == first.json()["offset"]
    assert found.json()["partition"] == first.json()["partition"]
    assert found.json()["messageId"] == first.json()["messageId"]
    missing = client.get(f"/v1/topics/{name}/messages/by-idempotency-key/never", headers=headers)
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "IDEMPOTENCY_KEY_NOT_FOUND"
    assert missing.json()["error"]["requestId"]


class RecordingPuts:
    """The real object store, remembering every key PUT (to find orphans)."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.keys: set[str] = set()

    async def put_async(self, key: str, data: bytes) -> None:
        self.keys.add(key)
        await self.real.put_async(key, data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_replicas_racing_on_idempotency_keys_all_get_the_winners_offset_and_leave_no_orphan(
    services: Services,
) -> None:
    topic = new_topic(services.database_url, partitions=2)
    keys = [f"race-{i}" for i in range(12)]

    async def race() -> tuple[list[Any], set[str]]:
        pools = [async_pool(settings.database(), f"test-race-{i}") for i in range(2)]
        stores = [
            RecordingPuts(S3ObjectStore.from_settings(settings.object_store())) for _ in pools
        ]
        writers = []
        for pool, store in zip(pools, stores, strict=True):
            await pool.open(wait=True)
            writers.append(SegmentWriter(pool, cast(Any, store), RESOLVING))
        for writer in writers:
            await writer.start()
        try:
            writes = [
                writer.write(topic, entries(1, i % 2, f"{key}-{n}", key=key) + entries(1, 0, "x"))
                for i, key in enumerate(keys)
                for n, writer in enumerate(writers)
            ]
            results = await asyncio.gather(*writes, return_exceptions=True)
        finally:
            for writer in writers:
                await writer.close()
            for pool in pools:
                await pool.close()
        return results, stores[0].keys | stores[1].keys

    results, put_keys = asyncio.run(race())
    failures = [r for r in results if isinstance(r, BaseException)]
    assert not failures, failures  # never "publishes kept conflicting"
    for first, second in zip(results[0::2], results[1::2], strict=True):
        assert first[0] == second[0]  # both replicas answer the winner's placement
    with connect(services.database_url) as conn:
        committed = {
            row["object_key"]
            for row in conn.execute(
                "SELECT object_key FROM segment_objects WHERE object_key = ANY(%s)",
                (sorted(put_keys),),
            ).fetchall()
        }
    assert put_keys == committed  # a conflict replaces its object: no orphan per contended key
