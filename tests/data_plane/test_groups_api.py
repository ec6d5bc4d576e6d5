"""Consumer-group membership over HTTP: join, sticky split, heartbeat, rejoin, leave, eviction."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from litestar.testing import TestClient

from tenants.models import NewOrganisation
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation


@pytest.fixture
def org(services: Services) -> NewOrganisation:
    return new_organisation(services.database_url, tier="pro")


def make_topic(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str], partitions: int = 4
) -> tuple[str, dict[str, str]]:
    headers = bearer(org.keys["production"].secret)
    name = f"orders.{unique('t')}"
    response = client.post(
        "/v1/topics", json={"name": name, "partitions": partitions}, headers=headers
    )
    assert response.status_code == 201, response.text
    return name, headers


def join(
    client: TestClient, topic: str, group: str, headers: dict[str, str], **body: Any
) -> dict[str, Any]:
    response = client.post(f"/v1/topics/{topic}/groups/{group}/members", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return dict(response.json())


def heartbeat(
    client: TestClient, topic: str, group: str, member: str, headers: dict[str, str]
) -> Any:
    return client.post(
        f"/v1/topics/{topic}/groups/{group}/members/{member}/heartbeat", headers=headers
    )


def test_two_members_split_four_partitions_and_one_takes_all_after_leave(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    topic, headers = make_topic(client, org, unique)
    first = join(client, topic, "workers", headers)
    assert first["assignments"] == [0, 1, 2, 3]
    second = join(client, topic, "workers", headers)
    assert second["generationId"] > first["generationId"]

    # The first member learns of the rebalance from its heartbeat and rejoins.
    beat = heartbeat(client, topic, "workers", first["memberId"], headers).json()
    assert beat["generationId"] == second["generationId"] and beat["shouldRejoin"] is True
    again = join(client, topic, "workers", headers, memberId=first["memberId"])
    assert len(again["assignments"]) == 2 and len(second["assignments"]) == 2
    assert sorted(again["assignments"] + second["assignments"]) == [0, 1, 2, 3]
    assert set(again["assignments"]) <= set(first["assignments"]), (
        "sticky: the first member kept its partitions"
    )
    assert (
        heartbeat(client, topic, "workers", first["memberId"], headers).json()["shouldRejoin"]
        is False
    )

    assert (
        client.delete(
            f"/v1/topics/{topic}/groups/workers/members/{second['memberId']}", headers=headers
        ).status_code
        == 204
    )
    assert (
        heartbeat(client, topic, "workers", first["memberId"], headers).json()["shouldRejoin"]
        is True
    )
    assert join(client, topic, "workers", headers, memberId=first["memberId"])["assignments"] == [
        0,
        1,
        2,
        3,
    ]

    described = client.get(f"/v1/topics/{topic}/groups/workers", headers=headers).json()
    assert described["consumers"] == 1
    assert [p["consumer"] for p in described["partitions"]] == [first["memberId"]] * 4


def test_silent_member_is_evicted_and_its_partitions_reassigned(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    topic, headers = make_topic(client, org, unique)
    quiet = join(client, topic, "g", headers, sessionTimeout="1s")
    alive = join(client, topic, "g", headers, sessionTimeout="30s")
    assert quiet["sessionTimeoutMs"] == 1000 and quiet["heartbeatIntervalMs"] < 1000
    time.sleep(1.5)
    beat = heartbeat(client, topic, "g", alive["memberId"], headers).json()
    assert beat["shouldRejoin"] is True
    assert join(client, topic, "g", headers, memberId=alive["memberId"])["assignments"] == [
        0,
        1,
        2,
        3,
    ]
    gone = heartbeat(client, topic, "g", quiet["memberId"], headers)
    assert gone.status_code == 404
    assert gone.json()["error"]["code"] == "MEMBER_NOT_FOUND"


def test_configure_list_describe_and_delete(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    topic, headers = make_topic(client, org, unique, partitions=2)
    body = {
        "startFrom": "earliest",
        "ackTimeout": "45s",
        "maxInFlight": 10,
        "deadLetter": {"maxRetries": 3, "retryDelay": "2s", "alertThreshold": 50},
    }
    configured = client.put(f"/v1/topics/{topic}/groups/billing", json=body, headers=headers)
    assert configured.status_code == 200, configured.text
    view = configured.json()
    assert view["config"] == {
        "startFrom": "earliest",
        "ackTimeout": "45s",
        "maxInFlight": 10,
        "sessionTimeout": "30s",
        "deadLetter": {"maxRetries": 3, "retryDelay": "2s", "alertThreshold": 50},
        "push": None,  # not a push group
    }
    assert view["partitions"] == [
        {"id": 0, "consumer": None, "offset": 0, "lag": 0},
        {"id": 1, "consumer": None, "offset": 0, "lag": 0},
    ]
    assert client.get(f"/v1/topics/{topic}/groups", headers=headers).json() == [
        {"name": "billing", "consumers": 0, "lag": 0, "deadLetters": 0}
    ]
    assert client.delete(f"/v1/topics/{topic}/groups/billing", headers=headers).status_code == 204
    missing = client.get(f"/v1/topics/{topic}/groups/billing", headers=headers)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "GROUP_NOT_FOUND"


def test_bad_configuration_is_422_naming_the_field(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    topic, headers = make_topic(client, org, unique, partitions=1)
    response = client.put(
        f"/v1/topics/{topic}/groups/g", json={"ackTimeout": "soon"}, headers=headers
    )
    assert response.status_code == 422
    assert "ackTimeout" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"ackTimeout": "500ms"}, "ackTimeout"),
        ({"ackTimeout": "13h"}, "ackTimeout"),
        ({"sessionTimeout": 0}, "sessionTimeout"),
        ({"sessionTimeout": "11m"}, "sessionTimeout"),
        ({"deadLetter": {"retryDelay": -1}}, "deadLetter.retryDelay"),
    ],
)
def test_a_duration_out_of_range_is_422_naming_the_field_and_changes_nothing(
    client: TestClient,
    org: NewOrganisation,
    unique: Callable[[str], str],
    body: dict[str, Any],
    field: str,
) -> None:
    topic, headers = make_topic(client, org, unique, partitions=1)
    response = client.put(f"/v1/topics/{topic}/groups/g", json=body, headers=headers)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "VALIDATION_ERROR" and field in error["message"]
    assert "between" in error["message"]
    missing = client.get(f"/v1/topics/{topic}/groups/g", headers=headers)
    assert missing.status_code == 404


@pytest.mark.parametrize("session_timeout", [0, -5, "1ms", "999ms", "11m"])
def test_a_join_with_a_session_timeout_out_of_range_is_422_and_joins_nobody(
    client: TestClient,
    org: NewOrganisation,
    unique: Callable[[str], str],
    session_timeout: str | int,
) -> None:
    topic, headers = make_topic(client, org, unique, partitions=1)
    response = client.post(
        f"/v1/topics/{topic}/groups/g/members",
        json={"sessionTimeout": session_timeout},
        headers=headers,
    )
    assert response.status_code == 422, response.text
    assert "sessionTimeout must be between 1s and 10m" in response.json()["error"]["message"]
    assert client.get(f"/v1/topics/{topic}/groups", headers=headers).json() == []


def test_groups_of_unknown_topic_and_other_environment_are_404(
    client: TestClient, org: NewOrganisation, services: Services, unique: Callable[[str], str]
) -> None:
    topic, headers = make_topic(client, org, unique, partitions=1)
    join(client, topic, "g", headers)
    stranger = new_organisation(services.database_url)
    for other in (bearer(stranger.keys["production"].secret), bearer(org.keys["staging"].secret)):
        response = client.get(f"/v1/topics/{topic}/groups/g", headers=other)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "TOPIC_NOT_FOUND"
        assert (
            client.post(f"/v1/topics/{topic}/groups/g/members", json={}, headers=other).status_code
            == 404
        )


def test_more_partitions_are_assigned_after_the_topic_grows(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    topic, headers = make_topic(client, org, unique, partitions=2)
    member = join(client, topic, "g", headers)
    assert member["assignments"] == [0, 1]
    assert (
        client.patch(f"/v1/topics/{topic}", json={"partitions": 4}, headers=headers).status_code
        == 200
    )
    # Published to the new partitions before the group noticed them: not skipped as "latest".
    published = client.post(
        f"/v1/topics/{topic}/messages/batch",
        json={"messages": [{"data": i, "key": f"k{i}"} for i in range(40)]},
        headers=headers,
    )
    assert published.status_code == 201, published.text
    results = published.json()["results"]
    on_new = {(r["partition"], r["offset"]) for r in results if r["partition"] >= 2}
    assert {p for p, _ in on_new} == {2, 3}
    assert heartbeat(client, topic, "g", member["memberId"], headers).json()["shouldRejoin"] is True
    assert join(client, topic, "g", headers, memberId=member["memberId"])["assignments"] == [
        0,
        1,
        2,
        3,
    ]
    pulled = client.post(
        f"/v1/topics/{topic}/groups/g/members/{member['memberId']}/pull",
        json={"maxMessages": 100},
        headers=headers,
    ).json()["messages"]
    assert {(m["partition"], m["offset"]) for m in pulled if m["partition"] >= 2} == on_new


def test_the_group_list_counts_only_members_within_their_session(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    topic, headers = make_topic(client, org, unique)
    join(client, topic, "g", headers, sessionTimeout="1s")
    join(client, topic, "g", headers, sessionTimeout="30s")
    listed = client.get(f"/v1/topics/{topic}/groups", headers=headers)
    assert listed.json() == [{"name": "g", "consumers": 2, "lag": 0, "deadLetters": 0}]
    time.sleep(1.2)
    # Before anything evicted the silent member (listing evicts nobody), it is not a consumer.
    listed = client.get(f"/v1/topics/{topic}/groups", headers=headers)
    assert listed.json() == [{"name": "g", "consumers": 1, "lag": 0, "deadLetters": 0}]
    stats = client.get(f"/v1/topics/{topic}", headers=headers).json()["stats"]
    assert stats["activeConsumers"] == 1
