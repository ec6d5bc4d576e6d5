"""A member's own window: set on join, pull or stream; a pull or stream never leases past it.

Also the batched nack, and the answers a client needs to keep its leases (``ackTimeoutMs``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient

from tenants import service as tenants
from tenants.models import NewOrganisation
from tests.data_plane.test_consume_api import Group
from tests.support.processes import wait_for
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation, run_in_tx

# Enterprise with a consume budget of 3 requests a second (admin generous for the set-up).
TIGHT = {"consume_per_s": 3, "admin_per_s": 1000, "publish_per_s": 1000}


@pytest.fixture
def org(services: Services) -> NewOrganisation:
    return new_organisation(services.database_url, tier="pro")


def _join(group: Group, **body: Any) -> dict[str, Any]:
    response = group.client.post(f"{group.base}/members", json=body, headers=group.headers)
    assert response.status_code == 201, response.text
    return dict(response.json())


def _pull(group: Group, member: str, **body: Any) -> list[dict[str, Any]]:
    response = group.client.post(
        f"{group.base}/members/{member}/pull",
        json={"maxMessages": 100, **body},
        headers=group.headers,
    )
    assert response.status_code == 200, response.text
    return list(response.json()["messages"])


def test_a_pull_never_leases_more_than_the_window_given_at_join(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique, ackTimeout="20s")
    group.publish(*range(10))
    joined = _join(group, maxInFlight=3)
    assert joined["maxInFlight"] == 3 and joined["ackTimeoutMs"] == 20_000
    first = _pull(group, joined["memberId"])
    assert [m["offset"] for m in first] == [0, 1, 2]
    assert _pull(group, joined["memberId"]) == [], "the window is full"
    assert group.ack(first[0]["ackId"], first[1]["ackId"]).status_code == 200
    assert [m["offset"] for m in _pull(group, joined["memberId"])] == [3, 4]


def test_a_pull_sets_the_window_and_a_rejoin_keeps_it(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique, maxInFlight=5)
    group.publish(*range(10))
    member = _join(group)["memberId"]
    assert len(_pull(group, member, maxInFlight=2)) == 2
    rejoined = _join(group, memberId=member)
    assert rejoined["maxInFlight"] == 2  # kept: the rejoin named none
    # A window above the group's maxInFlight is bounded by it.
    assert _join(group, memberId=member, maxInFlight=50)["maxInFlight"] == 5
    assert len(_pull(group, member)) == 3


def test_a_window_out_of_range_is_refused_with_the_field_named(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique)
    refused = group.client.post(
        f"{group.base}/members", json={"maxInFlight": 0}, headers=group.headers
    )
    assert refused.status_code in (400, 422)
    assert "maxInFlight" in refused.text


def test_heartbeat_answers_the_ack_timeout_and_may_change_the_window(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique, ackTimeout="7s", delivery="at-least-once")
    group.publish(*range(6))
    joined = _join(group, maxInFlight=5)
    assert joined["delivery"] == "at-least-once"
    member = joined["memberId"]
    beat = client.post(f"{group.base}/members/{member}/heartbeat", headers=group.headers)
    assert beat.json() == {"generationId": 1, "shouldRejoin": False, "ackTimeoutMs": 7000}
    narrowed = client.post(
        f"{group.base}/members/{member}/heartbeat", json={"maxInFlight": 2}, headers=group.headers
    )
    assert narrowed.status_code == 200, narrowed.text
    assert len(_pull(group, member)) == 2


def test_one_nack_request_fails_many_messages_and_names_each_refusal(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique, deadLetter={"maxRetries": 0, "retryDelay": "1s"})
    group.publish("a", "b", "c")
    member = group.join()
    a, b, c = (m["ackId"] for m in _pull(group, member))
    assert group.ack(c).status_code == 200
    body = {"nacks": [{"ackId": a, "error": "bad a"}, {"ackId": b, "error": "bad b"}, {"ackId": c}]}
    answer = client.post(f"{group.base}/nack", json=body, headers=group.headers)
    assert answer.status_code == 200, answer.text
    nacked = answer.json()["nacked"]
    assert [(n["ackId"], n["deadLettered"]) for n in nacked] == [(a, True), (b, True)]
    assert [r["ackId"] for r in answer.json()["rejected"]] == [c]
    dlq = client.get(f"{group.base}/dlq", headers=group.headers).json()
    assert [m["error"] for m in dlq["messages"]] == ["bad a", "bad b"]
    again = client.post(f"{group.base}/nack", json={"nacks": [{"ackId": a}]}, headers=group.headers)
    assert again.status_code == 409 and again.json()["error"]["code"] == "ACK_REJECTED"
    assert again.json()["nacked"] == [] and again.json()["rejected"][0]["ackId"] == a


def test_a_nack_names_one_message_or_many_not_both(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique)
    for body in ({}, {"ackId": "x", "nacks": [{"ackId": "y"}]}):
        refused = client.post(f"{group.base}/nack", json=body, headers=group.headers)
        assert refused.status_code in (400, 422), body
        assert refused.json()["error"]["code"] == "VALIDATION_ERROR"


def test_batch_publish_answers_each_messages_timestamp(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique)
    results = group.publish(1, 2)
    assert all(r["timestamp"].endswith("Z") for r in results)


# --- the stream ---------------------------------------------------------------------------------


@contextmanager
def _streaming(url: str, headers: dict[str, str]) -> Iterator[list[dict[str, Any]]]:
    """An SSE stream read in a thread; the messages received so far."""
    received: list[dict[str, Any]] = []
    opened = threading.Event()
    http = httpx.Client(timeout=60)

    def listen() -> None:
        try:
            with http.stream("GET", url, headers=headers) as response:
                assert response.status_code == 200, response.read()
                opened.set()
                for line in response.iter_lines():
                    if line.startswith("data:") and '"ackId"' in line:
                        received.append(json.loads(line[5:]))
        except httpx.HTTPError:
            return

    reader = threading.Thread(target=listen, daemon=True)
    reader.start()
    try:
        assert opened.wait(10), "the stream did not open"
        yield received
    finally:
        http.close()


@pytest.mark.e2e
def test_a_stream_never_pushes_more_than_its_window(
    api: str, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    with httpx.Client(base_url=api, timeout=30) as http:
        group = Group(http, org, unique)  # type: ignore[arg-type]
        group.publish(*range(20))
        member = _join(group)["memberId"]
        url = f"{api}{group.base}/members/{member}/stream?maxInFlight=4"
        with _streaming(url, bearer(org.keys["production"].secret)) as received:
            wait_for(lambda: len(received) == 4, 10, "the first window")
            time.sleep(0.5)
            assert [m["offset"] for m in received] == [0, 1, 2, 3], "no more than the window"
            assert group.ack(*(m["ackId"] for m in received[:3])).status_code == 200
            wait_for(lambda: len(received) == 7, 10, "room made by the acks, filled at once")
            time.sleep(0.5)
            assert [m["offset"] for m in received[4:]] == [4, 5, 6]


# --- the consumer's budget ----------------------------------------------------------------------


def test_heartbeats_and_extends_spend_the_lease_budget_not_the_consume_budget(
    client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    org = new_organisation(services.database_url, tier="enterprise")
    run_in_tx(
        services.database_url,
        lambda conn: tenants.set_tier(conn, org.organisation.id, "enterprise", TIGHT),
    )
    group = Group(client, org, unique)
    group.publish(*range(30))
    member = group.join()
    time.sleep(1.1)  # the set-up's requests leave the window
    leased = _pull(group, member)
    # One ack request of 10 ids counts once, like one of 1 id.
    assert group.ack(*(m["ackId"] for m in leased[:10])).status_code == 200
    assert group.ack(leased[10]["ackId"]).status_code == 200
    refused = group.ack(leased[11]["ackId"])
    assert refused.status_code == 429, "the consume budget of 3 is spent"
    assert refused.headers["X-RateLimit-Limit"] == "3"
    # ... yet the member can still heartbeat and extend what it holds.
    beat = client.post(f"{group.base}/members/{member}/heartbeat", headers=group.headers)
    body = {"ackIds": [leased[12]["ackId"]], "seconds": 30}
    extended = client.post(f"{group.base}/extend", json=body, headers=group.headers)
    again = client.post(f"{group.base}/members/{member}/heartbeat", headers=group.headers)
    assert [beat.status_code, extended.status_code, again.status_code] == [200, 200, 200]
    assert extended.json()["extended"] == [leased[12]["ackId"]]
    over = client.post(f"{group.base}/members/{member}/heartbeat", headers=group.headers)
    assert over.status_code == 429, "the lease budget is as large as the consume budget"
    assert over.json()["error"]["code"] == "RATE_LIMIT_EXCEEDED"
