"""Range leases over HTTP: a pull leases fresh offsets as one range; what leaves the range
(a nack, an expiry, a partial extend) follows the per-message rules, exactly as before."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient

from tenants.models import NewOrganisation
from tests.data_plane.test_consume_api import Group
from tests.support.services import Services
from tests.support.tenancy import new_organisation


@pytest.fixture
def org(services: Services) -> NewOrganisation:
    return new_organisation(services.database_url, tier="pro")


def extend(group: Group, *ack_ids: str, seconds: int = 30) -> dict[str, Any]:
    response = group.client.post(
        f"{group.base}/extend",
        json={"ackIds": list(ack_ids), "seconds": seconds},
        headers=group.headers,
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_a_partly_acked_range_redelivers_only_its_unacked_offsets_with_attempt_2(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique, ackTimeout="1s")
    group.publish(*range(5))
    member = group.join()
    first = {m["offset"]: m["ackId"] for m in group.pull(member)}
    assert group.ack(first[0], first[2], first[4]).status_code == 200
    assert group.offsets()["current"] == 1
    again = group.pull(member, wait_ms=5000)
    assert [(m["offset"], m["attempt"]) for m in again] == [(1, 2), (3, 2)]
    assert not {m["ackId"] for m in again} & set(first.values())
    assert group.ack(*(m["ackId"] for m in again)).status_code == 200
    assert group.offsets() == {"current": 5, "latest": 5, "lag": 0}
    assert group.pull(member, wait_ms=1500) == []


def test_one_request_acks_a_thousand_ids_and_acking_again_is_idempotent(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique)
    group.publish(*range(1000))
    member = group.join()
    leased = group.pull(member, max_messages=1000)
    assert [m["offset"] for m in leased] == list(range(1000))
    ack_ids = [m["ackId"] for m in leased]
    assert len(set(ack_ids)) == 1000
    first = group.ack(*ack_ids[:999])
    assert first.status_code == 200
    assert len(first.json()["acked"]) == 999 and first.json()["rejected"] == []
    assert group.offsets()["current"] == 999
    again = group.ack(*ack_ids[500:505])
    assert again.status_code == 200 and sorted(again.json()["acked"]) == sorted(ack_ids[500:505])
    assert group.ack(ack_ids[999]).status_code == 200
    assert group.offsets() == {"current": 1000, "latest": 1000, "lag": 0}


def test_a_nack_inside_a_range_retries_that_message_alone(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique, deadLetter={"maxRetries": 3, "retryDelay": "200ms"})
    group.publish(*range(3))
    member = group.join()
    acks = {m["offset"]: m["ackId"] for m in group.pull(member)}
    nacked = group.nack(acks[1], error="bad row")
    assert nacked.status_code == 200, nacked.text
    assert nacked.json() == {"ackId": acks[1], "deadLettered": False, "retryInMs": 200}
    assert group.ack(acks[0], acks[2]).status_code == 200
    assert group.offsets()["current"] == 1, "the nacked message is not done"
    stale = group.ack(acks[1])
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "ACK_REJECTED"
    retried = group.pull(member, wait_ms=5000)
    assert [(m["offset"], m["attempt"]) for m in retried] == [(1, 2)]
    assert group.ack(retried[0]["ackId"]).status_code == 200
    assert group.offsets()["current"] == 3


def test_a_nack_inside_a_range_with_no_retries_dead_letters_at_once(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str], services: Services
) -> None:
    group = Group(client, org, unique, deadLetter={"maxRetries": 0})
    group.publish({"n": 0}, {"n": 1})
    member = group.join()
    acks = {m["offset"]: m["ackId"] for m in group.pull(member)}
    result = group.nack(acks[0], error="poison").json()
    assert result == {"ackId": acks[0], "deadLettered": True, "retryInMs": None}
    assert group.offsets()["current"] == 0 + 1
    assert group.ack(acks[1]).status_code == 200
    assert group.offsets()["current"] == 2
    with psycopg.connect(services.database_url) as conn:
        rows = conn.execute(
            'SELECT d."offset", d.error, d.attempts FROM dead_letters d JOIN consumer_groups g ON g.id = d.group_id JOIN topics t ON t.id = g.topic_id WHERE t.name = %s',
            (group.topic,),
        ).fetchall()
    assert rows == [(0, "poison", 1)]


def test_committed_offset_never_moves_back_under_mixed_range_and_per_message_acks(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique, deadLetter={"maxRetries": 5, "retryDelay": "0ms"})
    group.publish(*range(6))
    member = group.join()
    first = {m["offset"]: m["ackId"] for m in group.pull(member, max_messages=3)}
    second = {m["offset"]: m["ackId"] for m in group.pull(member, max_messages=3)}
    seen = []

    def step(response: Any) -> None:
        assert response.status_code == 200, response.text
        seen.append(group.offsets()["current"])

    step(group.nack(first[1]))  # offset 1 leaves its range: a per-message retry
    step(group.ack(first[0]))
    step(group.ack(*second.values()))
    retried = group.pull(member, wait_ms=5000)
    assert [(m["offset"], m["attempt"]) for m in retried] == [(1, 2)]
    step(group.ack(first[2]))
    step(group.ack(retried[0]["ackId"]))
    assert seen == [0, 1, 1, 1, 6]
    assert seen == sorted(seen)


def test_at_least_once_late_ack_counts_until_the_message_is_delivered_again(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique, delivery="at-least-once", ackTimeout="1s")
    group.publish(*range(3))
    member = group.join()
    acks = {m["offset"]: m["ackId"] for m in group.pull(member)}
    time.sleep(1.3)
    assert group.ack(acks[0]).status_code == 200, "expired, not yet delivered again"
    again = group.pull(member, max_messages=1)
    assert [(m["offset"], m["attempt"]) for m in again] == [(1, 2)]
    assert group.ack(acks[2]).status_code == 200, "expired, still not delivered again"
    refused = group.ack(acks[1])
    assert refused.status_code == 409, "offset 1 was delivered again: its first ack id is over"
    assert refused.json()["error"]["code"] == "ACK_REJECTED"
    assert group.ack(again[0]["ackId"]).status_code == 200
    assert group.offsets() == {"current": 3, "latest": 3, "lag": 0}
    assert group.pull(member, wait_ms=1500) == []


def test_exactly_once_refuses_an_expired_range_ack_and_redelivers_it(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique, ackTimeout="1s")
    group.publish(*range(2))
    member = group.join()
    stale = [m["ackId"] for m in group.pull(member)]
    time.sleep(1.3)
    refused = group.ack(*stale)
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "ACK_REJECTED"
    assert "expired" in refused.json()["error"]["message"]
    again = group.pull(member)
    assert [(m["offset"], m["attempt"]) for m in again] == [(0, 2), (1, 2)]
    assert group.ack(*stale).status_code == 409
    assert group.ack(*(m["ackId"] for m in again)).status_code == 200
    assert group.offsets()["current"] == 2


def test_extending_part_of_a_range_keeps_only_those_messages(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique, ackTimeout="1s")
    group.publish(*range(3))
    member = group.join()
    acks = {m["offset"]: m["ackId"] for m in group.pull(member)}
    result = extend(group, acks[0])
    assert result == {"extended": [acks[0]], "notExtended": []}
    again = group.pull(member, wait_ms=5000)
    assert [(m["offset"], m["attempt"]) for m in again] == [(1, 2), (2, 2)]
    assert group.ack(acks[0]).status_code == 200, "its lease was extended"
    assert group.ack(*(m["ackId"] for m in again)).status_code == 200
    assert group.offsets()["current"] == 3


def test_extending_a_whole_range_keeps_it_leased(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique, ackTimeout="1s")
    group.publish(*range(3))
    member = group.join()
    acks = [m["ackId"] for m in group.pull(member)]
    assert group.ack(acks[0]).status_code == 200
    result = extend(group, *acks)
    assert sorted(result["extended"]) == sorted(acks[1:])
    assert result["notExtended"] == [acks[0]], "an acked message has no lease to extend"
    time.sleep(1.3)
    assert group.pull(member) == []
    assert group.ack(*acks[1:]).status_code == 200
    assert group.offsets()["current"] == 3


def test_max_in_flight_counts_range_and_per_message_leases(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(
        client, org, unique, maxInFlight=2, deadLetter={"maxRetries": 5, "retryDelay": "0ms"}
    )
    group.publish(*range(4))
    member = group.join()
    first = group.pull(member)
    assert [m["offset"] for m in first] == [0, 1]
    assert group.nack(first[0]["ackId"]).status_code == 200
    again = group.pull(member)
    assert [(m["offset"], m["attempt"]) for m in again] == [(0, 2)], "one slot: the retry first"
    assert group.pull(member) == []
    assert group.ack(first[1]["ackId"]).status_code == 200
    assert [m["offset"] for m in group.pull(member)] == [2]


def test_a_deleted_and_recreated_group_is_seen_at_once(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique)
    group.publish(*range(2))
    old_member = group.join()
    assert len(group.pull(old_member, max_messages=1)) == 1
    assert client.delete(group.base, headers=group.headers).status_code == 204
    gone = client.post(f"{group.base}/members/{old_member}/pull", json={}, headers=group.headers)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "GROUP_NOT_FOUND"
    configured = client.put(
        group.base, json={"startFrom": "earliest", "maxInFlight": 1}, headers=group.headers
    )
    assert configured.status_code == 200
    member = group.join()
    assert [m["offset"] for m in group.pull(member)] == [0], "new group, its own maxInFlight"
    stale = client.post(f"{group.base}/members/{old_member}/pull", json={}, headers=group.headers)
    assert stale.status_code == 404 and stale.json()["error"]["code"] == "MEMBER_NOT_FOUND"


def test_a_deleted_topic_stops_delivery_at_once(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique)
    group.publish(*range(3))
    member = group.join()
    assert len(group.pull(member, max_messages=1)) == 1
    assert client.delete(f"/v1/topics/{group.topic}", headers=group.headers).status_code in (
        202,
        204,
    )
    response = client.post(f"{group.base}/members/{member}/pull", json={}, headers=group.headers)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "TOPIC_NOT_FOUND"
