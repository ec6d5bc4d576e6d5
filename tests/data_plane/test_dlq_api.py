"""A group's dead-letter queue over HTTP: inspect, replay one, replay all.

What a user relies on: the queue shows each failed message as it was published, with why and
after how many attempts; a replayed message reaches the group's consumers again (attempt 1, same
id, partition and offset) even long after the committed offset passed it and after retention
dropped it from the topic; it is delivered once, and should it fail again it is back in the
queue with the new reason. Committed offsets and lag never move for a replay.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from litestar.testing import TestClient

from data_plane import tasks
from tenants.models import NewOrganisation
from tests.data_plane.stored import commit_segment, messages, object_store, seed_topic
from tests.data_plane.test_consume_api import Group
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation


@pytest.fixture
def org(services: Services) -> NewOrganisation:
    return new_organisation(services.database_url, tier="pro")


class DeadLetters:
    """The DLQ routes of a :class:`Group`."""

    def __init__(self, group: Group) -> None:
        self.group = group
        self.base = f"{group.base}/dlq"

    def inspect(self, **query: Any) -> dict[str, Any]:
        response = self.group.client.get(self.base, params=query, headers=self.group.headers)
        assert response.status_code == 200, response.text
        return dict(response.json())

    def replay(self, message_id: str | None = None) -> Any:
        path = f"{self.base}/replay" if message_id is None else f"{self.base}/{message_id}/replay"
        return self.group.client.post(path, headers=self.group.headers)


def _fail(
    group: Group, member: str, count: int, error: str = "bad payload"
) -> list[dict[str, Any]]:
    """Pull ``count`` messages and nack each once (``maxRetries`` 0: straight to the queue)."""
    delivered = group.pull(member, max_messages=count)
    assert len(delivered) == count
    for message in delivered:
        assert group.nack(message["ackId"], error=error).json()["deadLettered"] is True
    return delivered


def test_inspect_shows_each_failed_message_as_published_with_why_oldest_first(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique, deadLetter={"maxRetries": 1, "retryDelay": "0s"})
    response = client.post(
        f"/v1/topics/{group.topic}/messages",
        json={"data": {"order": 7}, "key": "cust-1", "headers": {"source": "web"}},
        headers=group.headers,
    )
    assert response.status_code == 201, response.text
    group.publish({"order": 8}, {"order": 9})
    member = group.join()
    first = group.pull(member, max_messages=3)
    for message in first:
        group.nack(message["ackId"], error="first try")
    again = group.pull(member, wait_ms=5000)
    assert [m["attempt"] for m in again] == [2, 2, 2]
    for message in again:
        assert group.nack(message["ackId"], error=f"gave up on {message['offset']}").json()[
            "deadLettered"
        ]
    queue = DeadLetters(group)

    page = queue.inspect()
    assert page["depth"] == 3 and page["nextAfter"] is None
    entry = page["messages"][0]
    assert entry["messageId"] == first[0]["messageId"]
    assert (entry["topic"], entry["partition"], entry["offset"]) == (group.topic, 0, 0)
    assert entry["data"] == {"order": 7}
    assert (entry["key"], entry["headers"]) == ("cust-1", {"source": "web"})
    assert entry["timestamp"] == first[0]["timestamp"]
    assert (entry["error"], entry["attempts"]) == ("gave up on 0", 2)
    assert entry["firstDeliveredAt"] <= entry["deadAt"]
    assert [m["data"] for m in page["messages"]] == [{"order": n} for n in (7, 8, 9)]

    head = queue.inspect(limit=2)
    assert [m["offset"] for m in head["messages"]] == [0, 1]
    rest = queue.inspect(limit=2, after=head["nextAfter"])
    assert [m["offset"] for m in rest["messages"]] == [2] and rest["nextAfter"] is None
    # The group's offsets count dead letters as done.
    assert group.offsets() == {"current": 3, "latest": 3, "lag": 0}


def test_bad_inspect_and_replay_requests_get_clear_errors(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique, deadLetter={"maxRetries": 0})
    group.publish("a", "b")
    member = group.join()
    dead = _fail(group, member, 1)
    queue = DeadLetters(group)
    for query in ({"limit": 0}, {"limit": 1001}, {"after": "msg_nonsense"}):
        response = client.get(queue.base, params=query, headers=group.headers)
        assert response.status_code in (400, 422), (query, response.text)
        assert response.json()["error"]["code"] == "VALIDATION_ERROR"
    # A message that was delivered but never dead-lettered, and an id of no message at all.
    alive = group.pull(member)[0]["messageId"]
    for message_id in (alive, "msg_nonsense"):
        response = queue.replay(message_id)
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == "DLQ_MESSAGE_NOT_FOUND"
    assert queue.replay(dead[0]["messageId"]).json() == {"replayed": 1}
    twice = queue.replay(dead[0]["messageId"])
    assert twice.status_code == 409
    assert twice.json()["error"]["code"] == "DLQ_MESSAGE_REPLAYED"
    missing = client.get(f"/v1/topics/{group.topic}/groups/nobody/dlq", headers=group.headers)
    assert missing.status_code == 404


def test_a_replayed_message_is_delivered_once_more_as_attempt_1_without_moving_offsets(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique, deadLetter={"maxRetries": 0})
    group.publish({"n": 0}, {"n": 1})
    member = group.join()
    dead = _fail(group, member, 2)
    group.publish({"n": 2})
    fresh = group.pull(member)
    assert [m["offset"] for m in fresh] == [2]
    queue = DeadLetters(group)
    assert queue.replay(dead[1]["messageId"]).json() == {"replayed": 1}
    assert queue.inspect()["depth"] == 1
    # This ack moves the committed offset and forgets what is below it: not the replay.
    assert group.ack(fresh[0]["ackId"]).status_code == 200
    assert group.offsets() == {"current": 3, "latest": 3, "lag": 0}

    again = group.pull(member)
    assert [(m["messageId"], m["offset"], m["data"], m["attempt"]) for m in again] == [
        (dead[1]["messageId"], 1, {"n": 1}, 1)
    ]
    assert again[0]["ackId"] != dead[1]["ackId"]
    assert group.ack(again[0]["ackId"]).json()["acked"] == [again[0]["ackId"]]
    assert group.pull(member) == []
    assert group.offsets() == {"current": 3, "latest": 3, "lag": 0}
    assert [m["offset"] for m in queue.inspect()["messages"]] == [0]


def test_replay_all_and_a_message_failing_again_returns_with_its_new_reason(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique, partitions=2, deadLetter={"maxRetries": 0})
    group.publish(*({"n": i} for i in range(6)))
    member = group.join()
    _fail(group, member, 6)
    queue = DeadLetters(group)
    assert queue.inspect()["depth"] == 6

    described = client.get(group.base, headers=group.headers).json()
    listed = client.get(f"/v1/topics/{group.topic}/groups", headers=group.headers).json()
    assert described["deadLetters"] == listed[0]["deadLetters"] == 6

    assert queue.replay().json() == {"replayed": 6}
    assert queue.inspect() == {"messages": [], "depth": 0, "nextAfter": None}
    assert client.get(group.base, headers=group.headers).json()["deadLetters"] == 0
    back = group.pull(member)
    assert sorted(m["data"]["n"] for m in back) == list(range(6))
    assert {m["attempt"] for m in back} == {1}
    poison, *good = back
    assert group.nack(poison["ackId"], error="still broken").json()["deadLettered"] is True
    assert len(group.ack(*(m["ackId"] for m in good)).json()["acked"]) == 5

    page = queue.inspect()
    assert [(m["messageId"], m["error"], m["attempts"]) for m in page["messages"]] == [
        (poison["messageId"], "still broken", 1)
    ]
    assert group.pull(member) == []
    assert queue.replay().json() == {"replayed": 1}
    assert [m["messageId"] for m in group.pull(member)] == [poison["messageId"]]


def test_a_waiting_consumer_wakes_for_a_replay(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique, deadLetter={"maxRetries": 0})
    group.publish("only")
    member = group.join()
    dead = _fail(group, member, 1)
    got: list[list[dict[str, Any]]] = []
    started = time.monotonic()
    waiter = threading.Thread(target=lambda: got.append(group.pull(member, wait_ms=20_000)))
    waiter.start()
    time.sleep(0.5)  # the long-poll is waiting
    assert DeadLetters(group).replay(dead[0]["messageId"]).status_code == 200
    waiter.join(30)
    assert [m["messageId"] for m in got[0]] == [dead[0]["messageId"]]
    assert time.monotonic() - started < 10, "the long-poll waited out its time instead of waking"


def test_a_seek_returns_pending_replays_to_the_queue(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique, deadLetter={"maxRetries": 0})
    group.publish("x", "y")
    member = group.join()
    dead = _fail(group, member, 2)
    queue = DeadLetters(group)
    assert queue.replay().json() == {"replayed": 2}
    seek = client.post(
        f"{group.base}/offsets/seek", json={"partition": 0, "offset": 2}, headers=group.headers
    )
    assert seek.status_code == 200, seek.text
    page = queue.inspect()
    assert page["depth"] == 2
    assert [m["messageId"] for m in page["messages"]] == [m["messageId"] for m in dead]
    assert group.pull(member) == []


def test_a_replay_is_delivered_from_its_copy_after_retention_dropped_the_message(
    services: Services, client: TestClient, unique: Callable[[str], str]
) -> None:
    url = services.database_url
    topic = seed_topic(url, unique("dlq-old"), partitions=1, retention_s=3600)
    two_hours_ago = int(time.time() * 1000) - 7_200_000
    commit_segment(url, object_store(), {(topic.id, 0): messages(2, "old", two_hours_ago)})
    headers = bearer(topic.secret)
    base = f"/v1/topics/{topic.name}/groups/workers"
    config = {"startFrom": "earliest", "deadLetter": {"maxRetries": 0}}
    assert client.put(base, json=config, headers=headers).status_code == 200
    member = client.post(f"{base}/members", json={}, headers=headers).json()["memberId"]
    pull = {"maxMessages": 10, "waitMs": 0}
    delivered = client.post(f"{base}/members/{member}/pull", json=pull, headers=headers).json()
    for message in delivered["messages"]:
        nacked = client.post(f"{base}/nack", json={"ackId": message["ackId"]}, headers=headers)
        assert nacked.json()["deadLettered"] is True

    tasks.apply_retention()
    gone = client.get(f"/v1/topics/{topic.name}/partitions/0/messages?offset=0", headers=headers)
    assert gone.status_code == 416, gone.text

    assert client.post(f"{base}/dlq/replay", headers=headers).json() == {"replayed": 2}
    again = client.post(f"{base}/members/{member}/pull", json=pull, headers=headers).json()
    originals = [(m["messageId"], m["data"], m["key"], m["headers"]) for m in delivered["messages"]]
    assert [
        (m["messageId"], m["data"], m["key"], m["headers"]) for m in again["messages"]
    ] == originals
    assert {m["attempt"] for m in again["messages"]} == {1}
    # Failing again, it is back in the queue with its copy.
    nacked = client.post(
        f"{base}/nack",
        json={"ackId": again["messages"][0]["ackId"], "error": "no"},
        headers=headers,
    )
    assert nacked.json()["deadLettered"] is True
    page = client.get(f"{base}/dlq", headers=headers).json()
    assert [(m["offset"], m["error"], m["data"]) for m in page["messages"]] == [
        (0, "no", delivered["messages"][0]["data"])
    ]


def test_another_tenant_cannot_see_or_replay_a_queue_and_replay_needs_admin(
    services: Services, client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique, deadLetter={"maxRetries": 0})
    group.publish("secret")
    member = group.join()
    dead = _fail(group, member, 1)
    stranger = bearer(new_organisation(services.database_url).keys["production"].secret)
    for response in (
        client.get(f"{group.base}/dlq", headers=stranger),
        client.post(f"{group.base}/dlq/replay", headers=stranger),
        client.post(f"{group.base}/dlq/{dead[0]['messageId']}/replay", headers=stranger),
    ):
        assert response.status_code == 404, response.text
        assert "secret" not in response.text
    created = client.post(
        "/v1/keys", json={"name": "reader", "scopes": ["consume"]}, headers=group.headers
    )
    assert created.status_code == 201, created.text
    reader = bearer(created.json()["key"])
    assert client.get(f"{group.base}/dlq", headers=reader).json()["depth"] == 1
    refused = client.post(f"{group.base}/dlq/replay", headers=reader)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "FORBIDDEN"
    assert DeadLetters(group).inspect()["depth"] == 1
