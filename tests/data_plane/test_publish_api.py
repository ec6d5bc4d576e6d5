"""Publishing over HTTP: durable single and batch publishes, partitioning, limits, idempotency.

What a publish answered is checked where it must be: in the block index in PostgreSQL and in the
segment object on S3, decoded with the real codec.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from litestar.testing import TestClient

from core import settings
from core.db import connect
from core.object_store import ObjectStore, S3ObjectStore
from data_plane.write.publish import message_id, murmur2, parse_message_id, partition_for_key
from data_plane.write.segment import Message, decode_block, decode_segment
from tenants.models import NewOrganisation
from tests.support.isolation import assert_isolated
from tests.support.runtime import data_plane_of
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation

MESSAGE_ID = re.compile(r"^msg_[0-9A-Za-z]{20}$")


@dataclass
class Topic:
    """A topic made through the API, with its organisation's production key."""

    id: str
    name: str
    org: NewOrganisation

    @property
    def headers(self) -> dict[str, str]:
        return bearer(self.org.keys["production"].secret)

    @property
    def path(self) -> str:
        return f"/v1/topics/{self.name}/messages"


@dataclass(frozen=True)
class Stored:
    """A message found in the index and its segment object."""

    partition: int
    offset: int
    message: Message
    object_key: str


def make_topic(
    client: TestClient,
    services: Services,
    name: str,
    tier: str = "pro",
    org: NewOrganisation | None = None,
    **options: Any,
) -> Topic:
    org = org or new_organisation(services.database_url, tier=tier)
    headers = bearer(org.keys["production"].secret)
    response = client.post("/v1/topics", json={"name": name, **options}, headers=headers)
    assert response.status_code == 201, response.text
    return Topic(response.json()["id"], name, org)


def store() -> ObjectStore:
    return S3ObjectStore.from_settings(settings.object_store())


def stored_messages(database_url: str, topic_id: str) -> list[Stored]:
    """Every message of the topic in the index, read back from S3 by ranged GET."""
    with connect(database_url) as conn:
        blocks = conn.execute(
            "SELECT partition, base_offset, count, object_key, byte_offset, byte_length"
            " FROM segment_blocks WHERE topic_id = %s ORDER BY partition, base_offset",
            (topic_id,),
        ).fetchall()
    objects, found = store(), []
    for block in blocks:
        start = block["byte_offset"]
        data = objects.get(block["object_key"], start, start + block["byte_length"] - 1)
        topic, partition, messages = decode_block(data)
        assert (topic, partition, len(messages)) == (topic_id, block["partition"], block["count"])
        found += [
            Stored(partition, block["base_offset"] + i, m, block["object_key"])
            for i, m in enumerate(messages)
        ]
    return found


def next_offsets(database_url: str, topic_id: str) -> dict[int, int]:
    with connect(database_url) as conn:
        rows = conn.execute(
            "SELECT partition, next_offset FROM partitions WHERE topic_id = %s", (topic_id,)
        ).fetchall()
    return {row["partition"]: row["next_offset"] for row in rows}


@pytest.fixture
def topic(client: TestClient, services: Services, unique: Callable[[str], str]) -> Topic:
    return make_topic(client, services, f"orders.{unique('events')}")


def test_publish_returns_offset_partition_timestamp_and_stores_the_message(
    client: TestClient, services: Services, topic: Topic
) -> None:
    before = datetime.now(UTC)
    body = {
        "data": {"type": "order.created", "amount": 9900},
        "key": "ord_1",
        "headers": {"a": "b"},
    }
    response = client.post(topic.path, json=body, headers=topic.headers)
    assert response.status_code == 201, response.text
    result = response.json()
    assert set(result) == {"messageId", "offset", "partition", "timestamp", "latency"}
    assert result["offset"] == 0
    assert result["partition"] == partition_for_key(b"ord_1", 3)
    assert MESSAGE_ID.match(result["messageId"])
    assert parse_message_id(topic.id, result["messageId"]) == (result["partition"], 0)
    assert result["timestamp"].endswith("Z")
    published = datetime.fromisoformat(result["timestamp"].replace("Z", "+00:00"))
    assert before.replace(microsecond=0) <= published <= datetime.now(UTC)
    assert isinstance(result["latency"], int) and result["latency"] >= 0
    [stored] = stored_messages(services.database_url, topic.id)
    assert (stored.partition, stored.offset) == (result["partition"], 0)
    assert json.loads(stored.message.value) == body["data"]
    assert stored.message.key == b"ord_1"
    assert stored.message.headers == {"a": "b"}
    assert re.fullmatch(r"segments/\d{4}/\d\d/\d\d/\d\d/[0-9a-f]{32}\.seg", stored.object_key)


def test_any_json_value_is_a_message(client: TestClient, services: Services, topic: Topic) -> None:
    values: list[Any] = ["text", 42, 1.5, None, True, [1, "two"], {"nested": {"deep": [None]}}]
    for value in values:
        response = client.post(topic.path, json={"data": value}, headers=topic.headers)
        assert response.status_code == 201, response.text
    stored = stored_messages(services.database_url, topic.id)
    assert sorted(json.dumps(json.loads(s.message.value)) for s in stored) == sorted(
        json.dumps(v) for v in values
    )


def test_batch_is_consecutive_per_partition_and_committed_as_one(
    client: TestClient, services: Services, topic: Topic
) -> None:
    client.post(topic.path, json={"data": "before", "key": "k1"}, headers=topic.headers)
    messages = [{"data": {"n": i}, "key": f"k{i % 5}"} for i in range(50)]
    response = client.post(
        f"{topic.path}/batch", json={"messages": messages}, headers=topic.headers
    )
    assert response.status_code == 201, response.text
    result = response.json()
    assert result["count"] == 50 and isinstance(result["latency"], int)
    results = result["results"]
    assert len(results) == 50
    for item, message in zip(results, messages, strict=True):
        assert item["partition"] == partition_for_key(message["key"].encode(), 3)
        assert item["messageId"] == message_id(topic.id, item["partition"], item["offset"])
    by_partition: dict[int, list[int]] = {}
    for item in results:
        by_partition.setdefault(item["partition"], []).append(item["offset"])
    for offsets in by_partition.values():
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
    stored = [
        s
        for s in stored_messages(services.database_url, topic.id)
        if s.message.value != b'"before"'
    ]
    assert len(stored) == 50
    assert len({s.object_key for s in stored}) == 1  # one flush, one object
    found = {(s.partition, s.offset): json.loads(s.message.value) for s in stored}
    assert found == {
        (r["partition"], r["offset"]): m["data"] for r, m in zip(results, messages, strict=True)
    }
    assert next_offsets(services.database_url, topic.id) == {
        p: max(offsets) + 1 for p, offsets in by_partition.items()
    } | {p: 0 for p in range(3) if p not in by_partition}


def test_same_key_same_partition_and_keyless_messages_spread(
    client: TestClient, services: Services, topic: Topic
) -> None:
    keyed = [
        client.post(
            topic.path, json={"data": i, "key": "customer-42"}, headers=topic.headers
        ).json()
        for i in range(5)
    ]
    assert len({r["partition"] for r in keyed}) == 1
    assert [r["offset"] for r in keyed] == list(range(5))
    keyless = [
        client.post(topic.path, json={"data": i}, headers=topic.headers).json()["partition"]
        for i in range(9)
    ]
    assert Counter(keyless) == {0: 3, 1: 3, 2: 3}


def test_partitioner_matches_kafka_default_partitioner() -> None:
    # Reference values of Kafka's Utils.murmur2 (signed 32-bit in Java).
    for key, java in (
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
    ):
        assert murmur2(key) == java & 0xFFFF_FFFF
    assert partition_for_key(b"foobar", 7) == (java_positive := (-790332482 & 0x7FFF_FFFF)) % 7
    assert java_positive > 0


def test_message_too_large_is_413_and_stores_nothing(
    client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    topic = make_topic(client, services, unique("big"), tier="developer")
    limit = 256 * 1024
    too_big = {"data": "x" * (limit - 2), "key": "k"}  # the JSON string adds its two quotes
    response = client.post(topic.path, json=too_big, headers=topic.headers)
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert error["code"] == "PAYLOAD_TOO_LARGE" and error["status"] == 413
    assert str(limit) in error["message"]
    exact = {"data": "x" * (limit - 3), "key": "k"}
    assert client.post(topic.path, json=exact, headers=topic.headers).status_code == 201
    batch = {"messages": [{"data": 1}, too_big]}
    response = client.post(f"{topic.path}/batch", json=batch, headers=topic.headers)
    assert response.status_code == 413
    assert "Message 1" in response.json()["error"]["message"]
    assert len(stored_messages(services.database_url, topic.id)) == 1


def test_batch_size_limits_are_422(client: TestClient, services: Services, topic: Topic) -> None:
    over = client.post(
        f"{topic.path}/batch",
        json={"messages": [{"data": i} for i in range(1001)]},
        headers=topic.headers,
    )
    assert over.status_code == 422, over.text
    assert over.json()["error"]["code"] == "QUOTA_EXCEEDED"
    assert "1000" in over.json()["error"]["message"]
    empty = client.post(f"{topic.path}/batch", json={"messages": []}, headers=topic.headers)
    assert empty.status_code == 422
    assert empty.json()["error"]["code"] == "VALIDATION_ERROR"
    full = client.post(
        f"{topic.path}/batch",
        json={"messages": [{"data": i} for i in range(1000)]},
        headers=topic.headers,
    )
    assert full.status_code == 201
    assert len(stored_messages(services.database_url, topic.id)) == 1000


def test_invalid_messages_are_422(client: TestClient, topic: Topic) -> None:
    for body in (
        {},
        {"data": 1, "headers": {"a": 1}},
        {"data": 1, "key": 5},
        {"data": 1, "idempotencyKey": ""},
    ):
        response = client.post(topic.path, json=body, headers=topic.headers)
        assert response.status_code == 422, (body, response.text)
        assert response.json()["error"]["code"] == "VALIDATION_ERROR"


def test_unknown_deleted_and_foreign_topics_are_404(
    client: TestClient, services: Services, topic: Topic
) -> None:
    response = client.post("/v1/topics/nope.nope/messages", json={"data": 1}, headers=topic.headers)
    assert response.status_code == 404
    assert response.json()["error"]["message"] == (
        "The topic 'nope.nope' does not exist in the current environment."
    )
    stranger = new_organisation(services.database_url, tier="pro")
    assert_isolated(
        client, topic.org, stranger, "POST", topic.path, json={"data": 1}, code="TOPIC_NOT_FOUND"
    )
    assert client.delete(f"/v1/topics/{topic.name}", headers=topic.headers).status_code == 202
    for path in (topic.path, f"{topic.path}/batch"):
        body = {"messages": [{"data": 1}]} if path.endswith("batch") else {"data": 1}
        response = client.post(path, json=body, headers=topic.headers)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "TOPIC_NOT_FOUND"


def test_idempotency_key_retry_returns_the_original(
    client: TestClient, services: Services, topic: Topic
) -> None:
    body = {"data": {"order": 1}, "idempotencyKey": "order-1-created"}
    first = client.post(topic.path, json=body, headers=topic.headers).json()
    client.post(topic.path, json={"data": "other"}, headers=topic.headers)
    retry = client.post(topic.path, json=body, headers=topic.headers)
    assert retry.status_code == 201
    again = retry.json()
    assert {k: again[k] for k in ("messageId", "offset", "partition", "timestamp")} == {
        k: first[k] for k in ("messageId", "offset", "partition", "timestamp")
    }
    stored = stored_messages(services.database_url, topic.id)
    assert sum(json.loads(s.message.value) == {"order": 1} for s in stored) == 1
    batch = {
        "messages": [
            {"data": "new", "idempotencyKey": "fresh"},
            {"data": {"order": 1}, "idempotencyKey": "order-1-created"},
            {"data": "new-again", "idempotencyKey": "fresh"},
        ]
    }
    results = client.post(f"{topic.path}/batch", json=batch, headers=topic.headers).json()[
        "results"
    ]
    assert results[1]["offset"] == first["offset"] and results[1]["partition"] == first["partition"]
    assert results[0] == results[2]
    assert len(stored_messages(services.database_url, topic.id)) == 3


def test_concurrent_requests_with_one_idempotency_key_store_one_message(
    client: TestClient, services: Services, topic: Topic
) -> None:
    body = {"data": {"charge": 99}, "idempotencyKey": "charge-99"}
    answers: list[dict[str, Any]] = []
    start = threading.Barrier(20)

    def publish() -> None:
        start.wait()
        response = client.post(topic.path, json=body, headers=topic.headers)
        assert response.status_code == 201, response.text
        answers.append(response.json())

    threads = [threading.Thread(target=publish) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 20
    assert len({(a["partition"], a["offset"], a["messageId"]) for a in answers}) == 1
    assert len(stored_messages(services.database_url, topic.id)) == 1


def test_at_least_once_topics_also_answer_a_retried_idempotency_key_with_its_offset(
    client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    # A retry after an unknown outcome must not store the message twice on either delivery.
    topic = make_topic(client, services, unique("alo"), delivery="at-least-once", partitions=1)
    body = {"data": 1, "idempotencyKey": "same"}
    offsets = [
        client.post(topic.path, json=body, headers=topic.headers).json()["offset"] for _ in range(2)
    ]
    assert offsets == [0, 0]
    assert client.post(topic.path, json={"data": 2}, headers=topic.headers).json()["offset"] == 1
    with connect(services.database_url) as conn:
        keys = conn.execute(
            "SELECT count(*) AS n FROM idempotency_keys WHERE topic_id = %s", (topic.id,)
        ).fetchone()
    assert keys == {"n": 1}


def test_standard_latency_class_publishes_durably(
    client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    topic = make_topic(client, services, unique("std"), latencyClass="standard")
    response = client.post(
        f"{topic.path}/batch",
        json={"messages": [{"data": i} for i in range(3)]},
        headers=topic.headers,
    )
    assert response.status_code == 201
    assert len(stored_messages(services.database_url, topic.id)) == 3


def test_new_partitions_receive_messages_after_patch(
    client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    topic = make_topic(client, services, unique("grow"), partitions=1)
    client.patch(f"/v1/topics/{topic.name}", json={"partitions": 4}, headers=topic.headers)
    partitions = {
        client.post(topic.path, json={"data": i}, headers=topic.headers).json()["partition"]
        for i in range(8)
    }
    assert partitions == {0, 1, 2, 3}


def test_publish_needs_the_publish_scope(client: TestClient, topic: Topic) -> None:
    consumer = client.post("/v1/keys", json={"scopes": ["consume"]}, headers=topic.headers).json()
    response = client.post(topic.path, json={"data": 1}, headers=bearer(consumer["key"]))
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "FORBIDDEN"
    assert "publish" in response.json()["error"]["message"]


# --- storage faults ----------------------------------------------------------------------------


class FailingPuts:
    """The real object store, except that the next ``failures`` PUTs raise."""

    def __init__(self, real: ObjectStore, failures: int) -> None:
        self.real = real
        self.failures = failures
        self.attempted: list[str] = []

    async def put_async(self, key: str, data: bytes) -> None:
        self.attempted.append(key)
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionError("injected: S3 unreachable")
        await self.real.put_async(key, data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.fixture
def own_app(services: Services) -> Iterator[TestClient]:
    """An API of its own, so a fault injected into its writer touches no other test."""
    from control_plane.app import create_app

    with TestClient(app=create_app(), raise_server_exceptions=False) as test_client:
        yield test_client


def test_failed_s3_put_is_503_commits_nothing_and_publishing_recovers(
    own_app: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    topic = make_topic(own_app, services, unique("fault"), partitions=2)
    writer = data_plane_of(own_app.app).writer
    faulty = FailingPuts(writer.objects, failures=1)
    writer.objects = faulty
    batch = {"messages": [{"data": i, "key": str(i), "idempotencyKey": f"i{i}"} for i in range(10)]}
    failed = own_app.post(f"{topic.path}/batch", json=batch, headers=topic.headers)
    assert failed.status_code == 503, failed.text
    error = failed.json()["error"]
    assert error["code"] == "SERVICE_UNAVAILABLE" and error["status"] == 503
    assert failed.headers.get("retry-after") == "1"
    assert faulty.attempted and faulty.attempted[0] not in store().list_keys("segments/")
    assert stored_messages(services.database_url, topic.id) == []
    assert next_offsets(services.database_url, topic.id) == {0: 0, 1: 0}
    retried = own_app.post(f"{topic.path}/batch", json=batch, headers=topic.headers)
    assert retried.status_code == 201, retried.text
    assert len(stored_messages(services.database_url, topic.id)) == 10
    segment = decode_segment(store().get(faulty.attempted[-1]))
    assert sum(len(m) for (t, _), m in segment.items() if t == topic.id) == 10
