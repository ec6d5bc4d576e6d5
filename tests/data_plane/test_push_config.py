"""A push group's settings over HTTP: the secret answered once, never shown again, rotation, push
off, validation, and no members joining a push group."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient

from core.sealed import Sealer, SealError
from tenants.models import NewOrganisation
from tests.support.push_receiver import Receiver, Reply
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation

SECRET = re.compile(r"^whsec_[0-9A-Za-z]{32}$")
ENDPOINT = "https://hooks.example.com/queuecore"


@pytest.fixture
def org(services: Services) -> NewOrganisation:
    return new_organisation(services.database_url, tier="pro")


def topic_of(client: TestClient, org: NewOrganisation, unique: Callable[[str], str]) -> str:
    name = unique("push")
    answer = client.post(
        "/v1/topics", json={"name": name, "partitions": 2}, headers=headers_of(org)
    )
    assert answer.status_code == 201, answer.text
    return name


def headers_of(org: NewOrganisation) -> dict[str, str]:
    return bearer(org.keys["production"].secret)


def put(client: TestClient, org: NewOrganisation, topic: str, body: dict[str, Any]) -> Any:
    return client.put(f"/v1/topics/{topic}/groups/hooks", json=body, headers=headers_of(org))


def test_the_secret_is_answered_once_then_only_its_hint(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    topic = topic_of(client, org, unique)
    push = {"endpoint": ENDPOINT, "maxInFlight": 20, "timeout": "45s", "ordered": True}
    made = put(client, org, topic, {"push": push})
    assert made.status_code == 200, made.text
    secret = made.json()["pushSecret"]
    assert SECRET.match(secret)
    assert made.json()["config"]["push"] == {
        "endpoint": ENDPOINT,
        "maxInFlight": 20,
        "timeout": "45s",
        "ordered": True,
        "secretHint": f"whsec_…{secret[-4:]}",
    }
    shown = client.get(f"/v1/topics/{topic}/groups/hooks", headers=headers_of(org))
    assert "pushSecret" not in shown.json()
    assert secret not in shown.text
    # Changing the endpoint keeps the secret; a PUT without "push" leaves push as it is.
    changed = put(client, org, topic, {"push": {**push, "endpoint": ENDPOINT + "/v2"}})
    assert "pushSecret" not in changed.json()
    kept = put(client, org, topic, {"ackTimeout": "2m"}).json()
    assert kept["config"]["push"]["endpoint"] == ENDPOINT + "/v2"
    assert kept["config"]["push"]["secretHint"].endswith(secret[-4:])
    assert kept["config"]["ackTimeout"] == "2m"
    rotated = put(client, org, topic, {"push": {**push, "rotateSecret": True}}).json()
    assert SECRET.match(rotated["pushSecret"]) and rotated["pushSecret"] != secret
    assert rotated["config"]["push"]["secretHint"].endswith(rotated["pushSecret"][-4:])


def test_push_off_and_on_again_makes_a_new_secret(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    topic = topic_of(client, org, unique)
    first = put(client, org, topic, {"push": {"endpoint": ENDPOINT}}).json()["pushSecret"]
    off = put(client, org, topic, {"push": None})
    assert off.status_code == 200 and off.json()["config"]["push"] is None
    again = put(client, org, topic, {"push": {"endpoint": ENDPOINT}}).json()
    assert SECRET.match(again["pushSecret"]) and again["pushSecret"] != first
    assert again["config"]["push"]["maxInFlight"] == 10
    assert again["config"]["push"]["timeout"] == "30s"


def test_the_secret_is_sealed_at_rest_and_bound_to_its_group(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str], services: Services
) -> None:
    topic = topic_of(client, org, unique)
    secret = put(client, org, topic, {"push": {"endpoint": ENDPOINT}}).json()["pushSecret"]
    with psycopg.connect(services.database_url) as conn:
        group_id, stored = conn.execute(
            "SELECT p.group_id, p.secret FROM group_push p JOIN consumer_groups g ON g.id = "
            "p.group_id JOIN topics t ON t.id = g.topic_id WHERE t.name = %s",
            (topic,),
        ).fetchone()
    assert secret not in stored
    assert stored.startswith("v1.")
    from core import settings

    sealer = Sealer(settings.push().secrets_key)
    assert sealer.open(stored, group_id) == secret
    with pytest.raises(SealError):
        sealer.open(stored, "grp_another")
    with pytest.raises(SealError):
        Sealer("another key of at least thirty-two characters").open(stored, group_id)


@pytest.mark.parametrize(
    ("push", "field"),
    [
        ({"endpoint": "ftp://example.com/x"}, "push.endpoint"),
        ({"endpoint": "https://"}, "push.endpoint"),
        ({"endpoint": ENDPOINT, "maxInFlight": 0}, "push.maxInFlight"),
        ({"endpoint": ENDPOINT, "maxInFlight": 1001}, "push.maxInFlight"),
        ({"endpoint": ENDPOINT, "timeout": "11m"}, "push.timeout"),
        ({"endpoint": ENDPOINT, "timeout": "soon"}, "push.timeout"),
        ({"endpoint": ENDPOINT, "secretHint": "x"}, "secretHint"),
        ({"maxInFlight": 5}, "endpoint"),
    ],
)
def test_bad_push_settings_are_a_422_naming_the_field(
    client: TestClient,
    org: NewOrganisation,
    unique: Callable[[str], str],
    push: dict[str, Any],
    field: str,
) -> None:
    topic = topic_of(client, org, unique)
    answer = put(client, org, topic, {"push": push})
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "VALIDATION_ERROR"
    assert field in error["message"] or field in str(error.get("details"))
    # Nothing was half-made: the group has no push.
    shown = client.get(f"/v1/topics/{topic}/groups/hooks", headers=headers_of(org))
    assert shown.status_code == 404 or shown.json()["config"]["push"] is None


def test_members_cannot_join_a_push_group_and_live_members_block_push(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    topic = topic_of(client, org, unique)
    members = f"/v1/topics/{topic}/groups/hooks/members"
    joined = client.post(members, json={}, headers=headers_of(org))
    assert joined.status_code == 201
    refused = put(client, org, topic, {"push": {"endpoint": ENDPOINT}})
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["code"] == "GROUP_HAS_ACTIVE_MEMBERS"
    left = client.delete(f"{members}/{joined.json()['memberId']}", headers=headers_of(org))
    assert left.status_code == 204
    assert put(client, org, topic, {"push": {"endpoint": ENDPOINT}}).status_code == 200
    again = client.post(members, json={}, headers=headers_of(org))
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "PUSH_GROUP"
    assert put(client, org, topic, {"push": None}).status_code == 200
    assert client.post(members, json={}, headers=headers_of(org)).status_code == 201


def test_a_test_push_is_signed_and_says_what_the_endpoint_answered(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    receiver = Receiver()
    receiver.start()
    try:
        topic = topic_of(client, org, unique)
        test = f"/v1/topics/{topic}/groups/hooks/push/test"
        plain = put(client, org, topic, {})
        assert plain.status_code == 200
        refused = client.post(test, headers=headers_of(org))
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "NOT_A_PUSH_GROUP"
        secret = put(client, org, topic, {"push": {"endpoint": receiver.url("/hook")}})
        secret = secret.json()["pushSecret"]
        answered = client.post(test, headers=headers_of(org))
        assert answered.status_code == 200, answered.text
        assert answered.json()["delivered"] is True and answered.json()["statusCode"] == 200
        [pushed] = receiver.at("/hook")
        assert pushed.signed_by(secret) and pushed.headers["queuecore-event"] == "push.test"
        assert pushed.json()["topic"] == topic and pushed.json()["data"]["test"] is True
        receiver.scripts["/hook"] = lambda *_: Reply(500)
        failed = client.post(test, headers=headers_of(org)).json()
        assert failed == {**failed, "delivered": False, "statusCode": 500, "error": "HTTP 500"}
        receiver.stop()
        down = client.post(test, headers=headers_of(org)).json()
        assert down["delivered"] is False and down["statusCode"] is None
        assert down["error"].startswith("ConnectError")
    finally:
        receiver.stop()


def test_another_environments_push_group_is_not_found(
    client: TestClient, org: NewOrganisation, services: Services, unique: Callable[[str], str]
) -> None:
    topic = topic_of(client, org, unique)
    assert put(client, org, topic, {"push": {"endpoint": ENDPOINT}}).status_code == 200
    other = new_organisation(services.database_url, tier="pro")
    for key in (other.keys["production"].secret, org.keys["staging"].secret):
        seen = client.get(f"/v1/topics/{topic}/groups/hooks", headers=bearer(key))
        tested = client.post(f"/v1/topics/{topic}/groups/hooks/push/test", headers=bearer(key))
        assert seen.status_code == tested.status_code == 404
        assert tested.json()["error"]["code"] == "TOPIC_NOT_FOUND"
