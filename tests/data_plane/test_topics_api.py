"""Topics over HTTP: create, list, describe, update, delete; validation, quotas, isolation."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from litestar.testing import TestClient

from core.db import connect
from tenants import service as tenants
from tenants.models import NewOrganisation
from tests.support.isolation import assert_hidden_from_strangers, assert_isolated
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation, run_in_tx

TOPIC_ID = re.compile(r"^top_[0-9A-Za-z]+$")
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|\+00:00)$")


def _admin(org: NewOrganisation, env: str = "production") -> dict[str, str]:
    return bearer(org.keys[env].secret)


def _error(response: object) -> dict[str, object]:
    body = response.json()  # type: ignore[attr-defined]
    error: dict[str, object] = body["error"]
    assert set(error) >= {"code", "message", "status", "requestId"}
    return error


def test_create_returns_the_topic_with_defaults_and_it_is_listed_and_described(
    client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    org = new_organisation(services.database_url, tier="pro")
    name = f"order.{unique('events')}"
    created = client.post("/v1/topics", json={"name": name}, headers=_admin(org))
    assert created.status_code == 201, created.text
    topic = created.json()
    assert TOPIC_ID.match(topic["id"])
    assert ISO_UTC.match(topic["createdAt"])
    assert {k: v for k, v in topic.items() if k not in {"id", "createdAt"}} == {
        "name": name,
        "partitions": 3,
        "retention": "7d",
        "delivery": "exactly-once",
        "latencyClass": "express",
        "status": "active",
    }
    listed = client.get("/v1/topics", headers=_admin(org)).json()["topics"]
    assert listed == [topic]
    described = client.get(f"/v1/topics/{name}", headers=_admin(org))
    assert described.status_code == 200
    described_body = described.json()
    assert described_body.pop("stats") == {
        "depth": 0,
        "inFlight": 0,
        "activeConsumers": 0,
        "consumerGroups": 0,
    }
    assert described_body == topic


def test_create_with_every_option(
    client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    org = new_organisation(services.database_url, tier="pro")
    body = {
        "name": unique("user.signups"),
        "retention": "30d",
        "delivery": "at-least-once",
        "partitions": 6,
        "latencyClass": "standard",
    }
    created = client.post("/v1/topics", json=body, headers=_admin(org))
    assert created.status_code == 201, created.text
    topic = created.json()
    assert {k: topic[k] for k in body} == body
    with connect(services.database_url) as conn:
        rows = conn.execute(
            "SELECT partition, next_offset FROM partitions WHERE topic_id = %s ORDER BY 1",
            (topic["id"],),
        ).fetchall()
    assert rows == [{"partition": p, "next_offset": 0} for p in range(6)]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "orders..created"}, "name"),
        ({"name": ".orders"}, "name"),
        ({"name": "orders."}, "name"),
        ({"name": "orders created"}, "name"),
        ({"name": "ordérs"}, "name"),
        ({"name": ""}, "name"),
        ({"name": "a" * 250}, "name"),
        ({"name": "ok", "retention": "7x"}, "retention"),
        ({"name": "ok", "retention": "0d"}, "retention"),
        ({"name": "ok", "retention": "d"}, "retention"),
        ({"name": "ok", "retention": "-3h"}, "retention"),
        ({"name": "ok", "delivery": "at-most-once"}, "delivery"),
        ({"name": "ok", "latencyClass": "turbo"}, "latencyClass"),
        ({"name": "ok", "partitions": 0}, "partitions"),
        ({"name": "ok", "partitions": "three"}, "partitions"),
        ({"retention": "7d"}, "name"),
    ],
)
def test_invalid_topic_is_422_naming_the_field(
    client: TestClient, services: Services, body: dict[str, object], field: str
) -> None:
    org = new_organisation(services.database_url, tier="pro")
    response = client.post("/v1/topics", json=body, headers=_admin(org))
    assert response.status_code == 422, response.text
    error = _error(response)
    assert error["code"] == "VALIDATION_ERROR"
    assert field in str(error["message"])
    if "name" in body:  # a missing field is named in the message only
        assert response.json()["error"]["details"][0]["field"] == field
    assert client.get("/v1/topics", headers=_admin(org)).json()["topics"] == []


def test_retention_units_and_longest_valid_name(
    client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    org = new_organisation(services.database_url, tier="pro")
    for retention, shown in (("12h", "12h"), ("90m", "90m"), ("48h", "2d"), ("120m", "2h")):
        body = {"name": unique("r"), "retention": retention}
        response = client.post("/v1/topics", json=body, headers=_admin(org))
        assert response.status_code == 201, response.text
        assert response.json()["retention"] == shown
    long_name = ".".join(["a" * 49] * 5)  # 249 characters
    response = client.post("/v1/topics", json={"name": long_name}, headers=_admin(org))
    assert response.status_code == 201, response.text


def test_duplicate_name_is_409_but_another_environment_may_use_it(
    client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    org = new_organisation(services.database_url, tier="pro")
    name = unique("dup.topic")
    assert client.post("/v1/topics", json={"name": name}, headers=_admin(org)).status_code == 201
    again = client.post("/v1/topics", json={"name": name}, headers=_admin(org))
    assert again.status_code == 409
    error = _error(again)
    assert error["code"] == "TOPIC_EXISTS"
    assert name in str(error["message"])
    staging = client.post("/v1/topics", json={"name": name}, headers=_admin(org, "staging"))
    assert staging.status_code == 201, staging.text


def test_unknown_topic_is_404_with_the_documented_body(
    client: TestClient, services: Services
) -> None:
    org = new_organisation(services.database_url, tier="pro")
    response = client.get("/v1/topics/user.events", headers=_admin(org))
    assert response.status_code == 404
    error = _error(response)
    assert error["code"] == "TOPIC_NOT_FOUND"
    assert error["message"] == "The topic 'user.events' does not exist in the current environment."
    assert error["status"] == 404
    assert error["requestId"] == response.headers["x-request-id"]
    for method in ("PATCH", "DELETE"):
        other = client.request(
            method, "/v1/topics/user.events", json={"partitions": 4}, headers=_admin(org)
        )
        assert other.status_code == 404
        assert _error(other)["code"] == "TOPIC_NOT_FOUND"


def test_patch_raises_partitions_and_changes_retention_but_never_lowers(
    client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    org = new_organisation(services.database_url, tier="pro")
    name = unique("grow")
    topic = client.post(
        "/v1/topics", json={"name": name, "partitions": 2}, headers=_admin(org)
    ).json()
    raised = client.patch(
        f"/v1/topics/{name}", json={"partitions": 5, "retention": "12h"}, headers=_admin(org)
    )
    assert raised.status_code == 200, raised.text
    assert (raised.json()["partitions"], raised.json()["retention"]) == (5, "12h")
    with connect(services.database_url) as conn:
        count = conn.execute(
            "SELECT count(*) AS n FROM partitions WHERE topic_id = %s", (topic["id"],)
        ).fetchone()
    assert count == {"n": 5}
    lowered = client.patch(f"/v1/topics/{name}", json={"partitions": 3}, headers=_admin(org))
    assert lowered.status_code == 422
    error = _error(lowered)
    assert error["code"] == "VALIDATION_ERROR"
    assert "only be increased" in str(error["message"])
    described = client.get(f"/v1/topics/{name}", headers=_admin(org)).json()
    assert (described["partitions"], described["retention"]) == (5, "12h")


def test_delete_answers_at_once_hides_the_topic_and_frees_the_name(
    client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    org = new_organisation(services.database_url, tier="pro")
    name = unique("gone")
    first = client.post("/v1/topics", json={"name": name}, headers=_admin(org)).json()
    deleted = client.delete(f"/v1/topics/{name}", headers=_admin(org))
    assert deleted.status_code == 202, deleted.text
    assert deleted.json()["status"] == "deleting"
    assert client.get(f"/v1/topics/{name}", headers=_admin(org)).status_code == 404
    assert client.get("/v1/topics", headers=_admin(org)).json()["topics"] == []
    assert client.delete(f"/v1/topics/{name}", headers=_admin(org)).status_code == 404
    second = client.post("/v1/topics", json={"name": name}, headers=_admin(org))
    assert second.status_code == 201
    assert second.json()["id"] != first["id"]
    with connect(services.database_url) as conn:
        status = conn.execute("SELECT status FROM topics WHERE id = %s", (first["id"],)).fetchone()
    # Still marked for the cleanup task, or already removed by it (a worker may be running).
    assert status in ({"status": "deleting"}, None)


def test_developer_tier_limits_partitions_and_retention(
    client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    org = new_organisation(services.database_url, tier="developer")
    too_many = client.post(
        "/v1/topics", json={"name": unique("p"), "partitions": 17}, headers=_admin(org)
    )
    assert too_many.status_code == 422
    error = _error(too_many)
    assert error["code"] == "QUOTA_EXCEEDED"
    assert "partitions" in str(error["message"]) and "16" in str(error["message"])
    too_long = client.post(
        "/v1/topics", json={"name": unique("r"), "retention": "8d"}, headers=_admin(org)
    )
    assert too_long.status_code == 422
    assert _error(too_long)["code"] == "QUOTA_EXCEEDED"
    assert "retention" in str(_error(too_long)["message"])
    name = unique("ok")
    assert (
        client.post(
            "/v1/topics", json={"name": name, "partitions": 16}, headers=_admin(org)
        ).status_code
        == 201
    )
    patched = client.patch(f"/v1/topics/{name}", json={"retention": "30d"}, headers=_admin(org))
    assert patched.status_code == 422
    assert _error(patched)["code"] == "QUOTA_EXCEEDED"


def test_topic_count_quota_per_environment(
    client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    org = new_organisation(services.database_url, tier="enterprise")
    run_in_tx(
        services.database_url,
        lambda conn: tenants.set_tier(conn, org.organisation.id, "enterprise", {"max_topics": 2}),
    )
    names = [unique("q") for _ in range(3)]
    for name in names[:2]:
        assert (
            client.post("/v1/topics", json={"name": name}, headers=_admin(org)).status_code == 201
        )
    third = client.post("/v1/topics", json={"name": names[2]}, headers=_admin(org))
    assert third.status_code == 409
    error = _error(third)
    assert error["code"] == "TOPIC_LIMIT_REACHED"
    assert "2 topics" in str(error["message"])
    # The quota is per environment, and a deleted topic no longer counts.
    staging = client.post("/v1/topics", json={"name": names[2]}, headers=_admin(org, "staging"))
    assert staging.status_code == 201
    assert client.delete(f"/v1/topics/{names[0]}", headers=_admin(org)).status_code == 202
    retry = client.post("/v1/topics", json={"name": names[2]}, headers=_admin(org))
    assert retry.status_code == 201, retry.text


def test_other_tenants_and_environments_get_404(
    client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    owner = new_organisation(services.database_url, tier="pro")
    stranger = new_organisation(services.database_url, tier="pro")
    name = unique("private")
    assert client.post("/v1/topics", json={"name": name}, headers=_admin(owner)).status_code == 201
    path = f"/v1/topics/{name}"
    assert_isolated(client, owner, stranger, "GET", path, code="TOPIC_NOT_FOUND")
    assert_isolated(
        client, owner, stranger, "PATCH", path, json={"partitions": 4}, code="TOPIC_NOT_FOUND"
    )
    hidden = assert_hidden_from_strangers(client, owner, stranger, "DELETE", path)
    assert all(r.json()["error"]["code"] == "TOPIC_NOT_FOUND" for r in hidden.values())
    for key in (stranger.keys["production"].secret, owner.keys["staging"].secret):
        assert client.get("/v1/topics", headers=bearer(key)).json()["topics"] == []
    assert client.get(path, headers=_admin(owner)).json()["partitions"] == 4


def test_topic_management_needs_the_admin_scope(
    client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    org = new_organisation(services.database_url, tier="pro")
    publisher = client.post(
        "/v1/keys", json={"scopes": ["publish"]}, headers=_admin(org, "development")
    ).json()["key"]
    response = client.post("/v1/topics", json={"name": unique("t")}, headers=bearer(publisher))
    assert response.status_code == 403
    assert _error(response)["code"] == "FORBIDDEN"
