"""Hostile input at the edge: NUL characters, invalid UTF-8, deep nesting, huge integers.

Each is answered with the documented error body (4xx), never a 500, and nothing is written.
"""

from __future__ import annotations

import secrets
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient

from tenants import service as tenants
from tests.control_plane.dashboard.pages import Browser, text_of
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation, run_in_tx

NUL = "\x00"
TOO_BIG = 2**64 + 1
GENEROUS = {"admin_per_s": 10_000, "publish_per_s": 10_000, "consume_per_s": 10_000}


class Tenant:
    """A fresh organisation's test key, a topic with a group, and a member of it."""

    def __init__(self, client: TestClient, services: Services) -> None:
        self.client = client
        org = new_organisation(services.database_url, tier="enterprise")
        run_in_tx(  # so that the many bad requests here are never rate limited
            services.database_url,
            lambda conn: tenants.set_tier(conn, org.organisation.id, "enterprise", GENEROUS),
        )
        self.headers = bearer(org.keys["development"].secret)
        self.topic = f"edge-{secrets.token_hex(4)}"
        created = client.post("/v1/topics", json={"name": self.topic}, headers=self.headers)
        assert created.status_code == 201, created.text
        self.group = f"/v1/topics/{self.topic}/groups/workers"
        joined = client.post(f"{self.group}/members", json={}, headers=self.headers)
        assert joined.status_code in (200, 201), joined.text
        self.member = joined.json()["memberId"]

    def send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """A request with the tenant's key."""
        headers = {**self.headers, **kwargs.pop("headers", {})}
        return self.client.request(method, path, headers=headers, **kwargs)


@pytest.fixture(scope="module")
def tenant(client: TestClient, services: Services) -> Tenant:
    return Tenant(client, services)


def assert_envelope(response: httpx.Response, statuses: tuple[int, ...]) -> dict[str, Any]:
    """A documented 4xx error body, never a 500."""
    assert response.status_code in statuses, (response.status_code, response.text)
    error = response.json()["error"]
    assert error["status"] == response.status_code
    assert error["code"] and error["message"]
    assert error["requestId"] == response.headers["x-request-id"]
    return dict(error)


REFUSED = (400, 404, 422)


def test_nul_in_login_is_a_validation_error(client: TestClient) -> None:
    for body in (
        {"email": f"a{NUL}@example.com", "password": "correct-horse-battery"},
        {"email": "a@example.com", "password": f"pass{NUL}word-long-enough"},
    ):
        error = assert_envelope(client.post("/auth/login", json=body), (422,))
        assert error["code"] == "VALIDATION_ERROR"


@pytest.mark.parametrize(
    "path",
    [
        "/v1/topics/bad%00name",
        "/v1/topics/bad%00name/groups/workers",
        "/v1/topics/{topic}/groups/bad%00group",
        "/v1/topics/{topic}/groups/workers/members/m%00x/heartbeat",
        "/v1/keys/key%00id",
    ],
)
def test_nul_in_a_path_id_is_not_found(tenant: Tenant, path: str) -> None:
    method = "DELETE" if path.startswith("/v1/keys") else "GET"
    method = "POST" if path.endswith("heartbeat") else method
    response = tenant.send(method, path.format(topic=tenant.topic))
    assert_envelope(response, (404,))


def test_nul_in_a_query_parameter_is_a_validation_error(tenant: Tenant) -> None:
    response = tenant.send("GET", f"{tenant.group}/dlq?after=x%00y")
    assert assert_envelope(response, (400, 422))["code"] == "VALIDATION_ERROR"


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/topics", {"name": f"t{NUL}x"}),
        ("POST", "/v1/topics/{topic}/messages", {"data": 1, "idempotencyKey": f"k{NUL}"}),
        ("POST", "/v1/topics/{topic}/messages", {"data": 1, "key": f"k{NUL}"}),
        ("POST", "{group}/members", {"clientId": f"c{NUL}"}),
        ("POST", "{group}/members", {"memberId": f"m{NUL}"}),
        ("POST", "{group}/nack", {"ackId": "x", "error": f"boom{NUL}"}),
        ("POST", "/v1/keys", {"name": f"k{NUL}"}),
        ("PUT", "{group}", {"ackTimeout": f"30s{NUL}"}),
    ],
)
def test_nul_in_a_body_field_is_a_validation_error(
    tenant: Tenant, method: str, path: str, body: dict[str, Any]
) -> None:
    target = path.format(topic=tenant.topic, group=tenant.group)
    error = assert_envelope(tenant.send(method, target, json=body), (422,))
    assert error["code"] == "VALIDATION_ERROR"


def test_nul_in_dashboard_sign_up_and_login_is_refused_on_the_page(
    client: TestClient,
) -> None:
    browser = Browser(client)
    signup = browser.signup(f"org{NUL}", f"nul-{secrets.token_hex(4)}@example.com")
    assert signup.status_code in (400, 422), signup.text
    assert "character" in text_of(signup)
    login = browser.login(f"nul{NUL}@example.com")
    assert login.status_code in (400, 401, 422), login.text


def test_invalid_utf8_body_is_400(tenant: Tenant) -> None:
    response = tenant.send(
        "POST",
        "/v1/topics",
        content=b'{"name": "caf\xe9"}',
        headers={"content-type": "application/json"},
    )
    error = assert_envelope(response, (400,))
    assert "UTF-8" in error["message"]


def test_json_nested_a_thousand_deep_is_400(tenant: Tenant) -> None:
    deep = b'{"data": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    response = tenant.send(
        "POST",
        f"/v1/topics/{tenant.topic}/messages",
        content=deep,
        headers={"content-type": "application/json"},
    )
    error = assert_envelope(response, (400,))
    assert "deep" in error["message"]


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", f"/v1/topics/{{topic}}/partitions/{TOO_BIG}/messages", None),
        ("GET", f"/v1/topics/{{topic}}/partitions/0/messages?offset={TOO_BIG}", None),
        ("GET", f"{{group}}/offsets?partition={TOO_BIG}", None),
        ("POST", "{group}/offsets/seek", {"partition": 0, "offset": TOO_BIG}),
        ("POST", "{group}/offsets/seek", {"partition": TOO_BIG, "offset": 0}),
        ("POST", "{group}/offsets/seek", {"partition": 75170270956726, "offset": 0}),
        ("GET", "/v1/topics/{topic}/partitions/3000000000/messages", None),
        ("GET", "{group}/offsets?partition=3000000000", None),
        ("POST", "{group}/offsets/reset", {"to": TOO_BIG}),
        ("POST", "/v1/topics", {"name": "big", "partitions": TOO_BIG}),
        ("POST", "{group}/extend", {"ackIds": ["x"], "seconds": TOO_BIG}),
    ],
)
def test_integers_beyond_64_bits_are_refused(
    tenant: Tenant, method: str, path: str, body: dict[str, Any] | None
) -> None:
    target = path.format(topic=tenant.topic, group=tenant.group)
    response = tenant.send(method, target, json=body) if body else tenant.send(method, target)
    assert_envelope(response, REFUSED)


def test_a_bad_request_leaves_the_topic_list_unchanged(tenant: Tenant) -> None:
    before = tenant.send("GET", "/v1/topics").json()["topics"]
    tenant.send("POST", "/v1/topics", json={"name": f"x{NUL}"})
    tenant.send("POST", "/v1/topics", json={"name": "big", "partitions": TOO_BIG})
    assert tenant.send("GET", "/v1/topics").json()["topics"] == before
