"""Delivery to group members: leases, acks, redelivery, nack backoff, dead letters, offsets."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient

from tenants.models import NewOrganisation
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation


class Group:
    """A topic with one group, driven over HTTP like a client library would."""

    def __init__(
        self,
        client: TestClient,
        org: NewOrganisation,
        unique: Callable[[str], str],
        *,
        partitions: int = 1,
        delivery: str = "exactly-once",
        **config: Any,
    ) -> None:
        self.client, self.headers = client, bearer(org.keys["production"].secret)
        self.topic = f"jobs.{unique('t')}"
        created = client.post(
            "/v1/topics",
            json={"name": self.topic, "partitions": partitions, "delivery": delivery},
            headers=self.headers,
        )
        assert created.status_code == 201, created.text
        self.base = f"/v1/topics/{self.topic}/groups/workers"
        response = client.put(
            self.base, json={"startFrom": "earliest", **config}, headers=self.headers
        )
        assert response.status_code == 200, response.text

    def publish(self, *values: Any, key: str | None = None) -> list[dict[str, Any]]:
        messages = [{"data": v, **({"key": key} if key else {})} for v in values]
        response = self.client.post(
            f"/v1/topics/{self.topic}/messages/batch",
            json={"messages": messages},
            headers=self.headers,
        )
        assert response.status_code == 201, response.text
        return list(response.json()["results"])

    def join(self, **body: Any) -> str:
        response = self.client.post(f"{self.base}/members", json=body, headers=self.headers)
        assert response.status_code == 201, response.text
        return str(response.json()["memberId"])

    def pull(self, member: str, max_messages: int = 100, wait_ms: int = 0) -> list[dict[str, Any]]:
        response = self.client.post(
            f"{self.base}/members/{member}/pull",
            json={"maxMessages": max_messages, "waitMs": wait_ms},
            headers=self.headers,
        )
        assert response.status_code == 200, response.text
        return list(response.json()["messages"])

    def ack(self, *ack_ids: str) -> Any:
        return self.client.post(
            f"{self.base}/ack", json={"ackIds": list(ack_ids)}, headers=self.headers
        )

    def nack(self, ack_id: str, error: str = "boom") -> Any:
        return self.client.post(
            f"{self.base}/nack", json={"ackId": ack_id, "error": error}, headers=self.headers
        )

    def offsets(self, partition: int = 0) -> dict[str, int]:
        return dict(
            self.client.get(
                f"{self.base}/offsets?partition={partition}", headers=self.headers
            ).json()
        )


@pytest.fixture
def org(services: Services) -> NewOrganisation:
    return new_organisation(services.database_url, tier="pro")


def test_pull_delivers_in_order_and_acks_commit_the_offset(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique)
    group.publish(*({"n": i} for i in range(5)))
    member = group.join()
    messages = group.pull(member)
    assert [m["offset"] for m in messages] == [0, 1, 2, 3, 4]
    assert [m["data"] for m in messages] == [{"n": i} for i in range(5)]
    assert {m["attempt"] for m in messages} == {1}
    assert set(messages[0]) == {
        "messageId",
        "topic",
        "partition",
        "offset",
        "data",
        "key",
        "headers",
        "timestamp",
        "attempt",
        "ackId",
    }
    assert group.offsets() == {"current": 0, "latest": 5, "lag": 5}
    assert group.ack(*(m["ackId"] for m in messages)).json()["acked"]
    assert group.offsets() == {"current": 5, "latest": 5, "lag": 0}
    assert group.pull(member) == []


def test_unacked_message_returns_after_ack_timeout_with_attempt_2(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique, ackTimeout="1s")
    group.publish({"job": 1})
    member = group.join()
    first = group.pull(member)
    assert [m["attempt"] for m in first] == [1]
    assert group.pull(member) == [], "still leased"
    again = group.pull(member, wait_ms=5000)
    assert [(m["offset"], m["attempt"]) for m in again] == [(0, 2)]
    assert again[0]["ackId"] != first[0]["ackId"]


def test_redelivery_goes_to_the_partitions_current_owner(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique, ackTimeout="30s")
    group.publish({"job": 1})
    first_member = group.join()
    assert len(group.pull(first_member)) == 1
    second_member = group.join()
    assert group.pull(second_member) == [], "the only partition still belongs to the first member"
    assert (
        client.delete(f"{group.base}/members/{first_member}", headers=group.headers).status_code
        == 204
    )
    group.join(memberId=second_member)
    again = group.pull(second_member)
    assert [(m["offset"], m["attempt"]) for m in again] == [(0, 2)]


def test_stale_ack_is_refused_on_exactly_once_and_acked_message_never_returns(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique, ackTimeout="1s")
    group.publish({"job": 1})
    member = group.join()
    stale = group.pull(member)[0]["ackId"]
    current = group.pull(member, wait_ms=5000)[0]["ackId"]
    refused = group.ack(stale)
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "ACK_REJECTED"
    # Every id's verdict, as in a 200 that acked some of them.
    assert refused.json()["acked"] == []
    assert [r["ackId"] for r in refused.json()["rejected"]] == [stale]
    assert group.ack(current).status_code == 200
    time.sleep(1.2)
    assert group.pull(member, wait_ms=300) == []
    assert group.offsets()["current"] == 1
    # Still refused once both leases are forgotten (only what was acked leaves a tombstone).
    again = group.ack(stale)
    assert again.status_code == 409 and "superseded" in again.json()["error"]["message"]


def test_expired_lease_cannot_be_acked_on_exactly_once_but_can_on_at_least_once(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    strict = Group(client, org, unique, ackTimeout="1s")
    lenient = Group(client, org, unique, delivery="at-least-once", ackTimeout="1s")
    acks = {}
    for group in (strict, lenient):
        group.publish({"job": 1})
        acks[group.topic] = group.pull(group.join())[0]["ackId"]
    time.sleep(1.3)
    assert strict.ack(acks[strict.topic]).status_code == 409
    assert lenient.ack(acks[lenient.topic]).status_code == 200
    assert lenient.offsets()["current"] == 1


def test_nack_backoff_doubles_and_max_retries_dead_letters(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str], services: Services
) -> None:
    group = Group(client, org, unique, deadLetter={"maxRetries": 2, "retryDelay": "200ms"})
    group.publish({"poison": True})
    member = group.join()
    delays = []
    for attempt in (1, 2, 3):
        delivered = group.pull(member, wait_ms=5000)
        assert [m["attempt"] for m in delivered] == [attempt]
        result = group.nack(delivered[0]["ackId"], error=f"failure {attempt}").json()
        delays.append(result["retryInMs"])
    assert delays == [200, 400, None]
    assert result["deadLettered"] is True
    assert group.offsets() == {"current": 1, "latest": 1, "lag": 0}
    assert group.pull(member, wait_ms=1000) == []
    with psycopg.connect(services.database_url) as conn:
        row = conn.execute(
            "SELECT d.error, d.attempts, convert_from(d.value, 'UTF8') FROM dead_letters d JOIN consumer_groups g ON g.id = d.group_id JOIN topics t ON t.id = g.topic_id WHERE t.name = %s",
            (group.topic,),
        ).fetchone()
    assert row == ("failure 3", 3, '{"poison":true}')


def test_committed_offset_is_the_lowest_not_done_and_never_moves_back(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique)
    group.publish(*range(6))
    member = group.join()
    acks = {m["offset"]: m["ackId"] for m in group.pull(member)}
    seen = []
    for batch in ([3, 4], [0], [5], [1, 2]):
        assert group.ack(*(acks[o] for o in batch)).status_code == 200
        seen.append(group.offsets()["current"])
    assert seen == [0, 1, 1, 6]
    assert seen == sorted(seen)


def test_max_in_flight_caps_unacked_deliveries(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique, maxInFlight=2)
    group.publish(*range(5))
    member = group.join()
    first = group.pull(member)
    assert [m["offset"] for m in first] == [0, 1]
    assert group.pull(member) == []
    group.ack(first[0]["ackId"])
    assert [m["offset"] for m in group.pull(member)] == [2]


def test_seek_and_reset_move_delivery_and_reset_refuses_active_members(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique)
    group.publish(*range(10))
    member = group.join()
    group.ack(*(m["ackId"] for m in group.pull(member)))
    seek = client.post(
        f"{group.base}/offsets/seek", json={"partition": 0, "offset": 7}, headers=group.headers
    )
    assert seek.status_code == 200, seek.text
    assert [m["offset"] for m in group.pull(member)] == [7, 8, 9]
    refused = client.post(
        f"{group.base}/offsets/reset", json={"to": "earliest"}, headers=group.headers
    )
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "GROUP_HAS_ACTIVE_MEMBERS"
    client.delete(f"{group.base}/members/{member}", headers=group.headers)
    reset = client.post(
        f"{group.base}/offsets/reset", json={"to": "earliest"}, headers=group.headers
    )
    assert reset.status_code == 200, reset.text
    assert reset.json()["partitions"][0]["current"] == 0
    assert [m["offset"] for m in group.pull(group.join())] == list(range(10))
    client.delete(f"{group.base}/members/{member}", headers=group.headers)


def test_keyed_messages_reach_only_the_owner_of_their_partition(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique, partitions=4)
    one, two = group.join(), group.join()
    one_parts = set(
        client.post(f"{group.base}/members", json={"memberId": one}, headers=group.headers).json()[
            "assignments"
        ]
    )
    results = group.publish(*range(40))
    got_one = group.pull(one, max_messages=100)
    got_two = group.pull(two, max_messages=100)
    assert {m["partition"] for m in got_one} <= one_parts
    assert not {m["partition"] for m in got_two} & one_parts
    assert len(got_one) + len(got_two) == len(results)


def test_pull_for_unknown_member_is_404(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique)
    response = client.post(f"{group.base}/members/csr_nobody/pull", json={}, headers=group.headers)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "MEMBER_NOT_FOUND"


def test_topic_describe_shows_depth_in_flight_and_active_consumers(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique, partitions=2)
    group.publish(*range(7))
    member = group.join()
    leased = group.pull(member, max_messages=3)
    group.ack(leased[0]["ackId"])
    stats = client.get(f"/v1/topics/{group.topic}", headers=group.headers).json()["stats"]
    assert stats == {"depth": 7, "inFlight": 2, "activeConsumers": 1, "consumerGroups": 1}


def test_acks_spanning_partitions_race_pulls_without_errors(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    import threading

    group = Group(client, org, unique, partitions=4)
    member = group.join()
    group.publish(*range(400))
    leased = group.pull(member, max_messages=400)
    assert len(leased) == 400
    # Ack ids across all partitions, highest partition first, while the same member keeps pulling.
    ordered = sorted(leased, key=lambda m: (-m["partition"], m["offset"]))
    batches = [[m["ackId"] for m in ordered[i::100]] for i in range(100)]
    failures: list[int] = []
    stop = threading.Event()

    def keep_pulling() -> None:
        while not stop.is_set():
            status = client.post(
                f"{group.base}/members/{member}/pull",
                json={"maxMessages": 10},
                headers=group.headers,
            ).status_code
            if status != 200:
                failures.append(status)

    pullers = [threading.Thread(target=keep_pulling) for _ in range(3)]
    for puller in pullers:
        puller.start()
    try:
        for batch in batches:
            response = group.ack(*batch)
            if response.status_code != 200:
                failures.append(response.status_code)
    finally:
        stop.set()
        for puller in pullers:
            puller.join(30)
    assert failures == []
    offsets = client.get(f"{group.base}/offsets", headers=group.headers).json()["partitions"]
    assert sum(p["lag"] for p in offsets) == 0
