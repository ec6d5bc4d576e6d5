"""Consumer groups behind retention: offsets the retention task dropped are skipped, never stuck.

A group that had not consumed a partition's oldest messages when retention dropped them (a slow
or stopped consumer) must carry on from the earliest retained offset, as a Kafka consumer with
``auto.offset.reset=earliest`` or a Pub/Sub subscription whose backlog expired does, instead of
failing every pull with ``416 OFFSET_OUT_OF_RANGE``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from litestar.testing import TestClient

from data_plane import tasks
from tests.data_plane.stored import SeededTopic, commit_segment, messages, object_store, seed_topic
from tests.support.services import Services
from tests.support.tenancy import bearer

HOUR_MS = 3_600_000


class _Group:
    """Group ``workers`` of a seeded topic, over HTTP."""

    def __init__(self, client: TestClient, topic: SeededTopic, name: str = "workers") -> None:
        self.client, self.headers = client, bearer(topic.secret)
        self.base = f"/v1/topics/{topic.name}/groups/{name}"
        config = {"startFrom": "earliest", "ackTimeout": "1s"}
        assert client.put(self.base, json=config, headers=self.headers).status_code == 200
        joined = client.post(f"{self.base}/members", json={}, headers=self.headers)
        assert joined.status_code == 201, joined.text
        self.member = joined.json()["memberId"]

    def pull(self, max_messages: int = 100) -> list[dict[str, Any]]:
        response = self.client.post(
            f"{self.base}/members/{self.member}/pull",
            json={"maxMessages": max_messages, "waitMs": 0},
            headers=self.headers,
        )
        assert response.status_code == 200, response.text
        return list(response.json()["messages"])

    def ack(self, deliveries: list[dict[str, Any]]) -> None:
        ack_ids = [d["ackId"] for d in deliveries]
        response = self.client.post(
            f"{self.base}/ack", json={"ackIds": ack_ids}, headers=self.headers
        )
        assert response.status_code == 200, response.text
        assert response.json()["rejected"] == []

    def offsets(self) -> dict[str, int]:
        response = self.client.get(f"{self.base}/offsets?partition=0", headers=self.headers)
        assert response.status_code == 200, response.text
        return dict(response.json())


def _old_and_fresh(services: Services, unique: Callable[[str], str]) -> SeededTopic:
    """A one-partition topic with 5 messages past its 1 h retention, then 3 fresh ones."""
    url, store = services.database_url, object_store()
    topic = seed_topic(url, unique("behind"), partitions=1, retention_s=3600)
    now_ms = int(time.time() * 1000)
    commit_segment(url, store, {(topic.id, 0): messages(5, "old", now_ms - 2 * HOUR_MS)})
    commit_segment(url, store, {(topic.id, 0): messages(3, "fresh", now_ms)})
    return topic


def test_a_group_that_never_reached_the_dropped_offsets_continues_from_the_earliest(
    services: Services, client: TestClient, unique: Callable[[str], str]
) -> None:
    topic = _old_and_fresh(services, unique)
    group = _Group(client, topic)
    assert group.offsets() == {"current": 0, "latest": 8, "lag": 8}

    tasks.apply_retention()

    assert group.offsets() == {"current": 5, "latest": 8, "lag": 3}
    delivered = group.pull()
    assert [(d["offset"], d["data"]["tag"], d["attempt"]) for d in delivered] == [
        (5, "fresh", 1),
        (6, "fresh", 1),
        (7, "fresh", 1),
    ]
    group.ack(delivered)
    assert group.offsets() == {"current": 8, "latest": 8, "lag": 0}


def test_leases_on_dropped_offsets_end_without_blocking_the_group(
    services: Services, client: TestClient, unique: Callable[[str], str]
) -> None:
    topic = _old_and_fresh(services, unique)
    group = _Group(client, topic)
    leased = group.pull(max_messages=2)
    assert [d["offset"] for d in leased] == [0, 1]

    tasks.apply_retention()
    time.sleep(1.2)  # the two leases expire; their messages are gone, so they cannot come back

    delivered = group.pull()
    assert [(d["offset"], d["data"]["tag"]) for d in delivered] == [
        (5, "fresh"),
        (6, "fresh"),
        (7, "fresh"),
    ]
    group.ack(delivered)
    assert group.pull() == []
    assert group.offsets() == {"current": 8, "latest": 8, "lag": 0}


def test_expired_leases_straddling_the_retention_point_redeliver_what_is_retained(
    services: Services, client: TestClient, unique: Callable[[str], str]
) -> None:
    topic = _old_and_fresh(services, unique)
    group = _Group(client, topic)
    assert [d["offset"] for d in group.pull(max_messages=7)] == list(range(7))

    tasks.apply_retention()
    time.sleep(1.2)  # all seven expire: 0-4 are gone, 5 and 6 are not

    delivered = group.pull()
    assert [(d["offset"], d["data"]["tag"], d["attempt"]) for d in delivered] == [
        (5, "fresh", 2),
        (6, "fresh", 2),
        (7, "fresh", 1),
    ]
    group.ack(delivered)
    assert group.offsets() == {"current": 8, "latest": 8, "lag": 0}
