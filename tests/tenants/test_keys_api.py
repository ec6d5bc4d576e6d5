"""API keys over HTTP: formats, the two-key limit, scopes, revocation, no oracle on 401."""

from __future__ import annotations

import re

from litestar.testing import TestClient

from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation


def test_new_organisation_has_a_key_per_environment_with_the_right_prefix(
    services: Services,
) -> None:
    org = new_organisation(services.database_url)
    assert set(org.keys) == {"development", "staging", "production"}
    assert re.fullmatch(r"pq_live_sk_[0-9A-Za-z]{32}", org.keys["production"].secret)
    assert re.fullmatch(r"pq_test_sk_[0-9A-Za-z]{32}", org.keys["development"].secret)
    assert re.fullmatch(r"pq_test_sk_[0-9A-Za-z]{32}", org.keys["staging"].secret)


def test_list_keys_shows_hints_never_secrets(client: TestClient, services: Services) -> None:
    org = new_organisation(services.database_url)
    secret = org.keys["production"].secret
    response = client.get("/v1/keys", headers=bearer(secret))
    assert response.status_code == 200, response.text
    keys = response.json()["keys"]
    assert [k["id"] for k in keys] == [org.keys["production"].key.id]
    assert keys[0]["hint"] == f"…{secret[-4:]}"
    assert secret not in response.text


def test_third_active_key_is_refused_with_409(client: TestClient, services: Services) -> None:
    org = new_organisation(services.database_url)
    headers = bearer(org.keys["staging"].secret)
    second = client.post("/v1/keys", json={"name": "rotation"}, headers=headers)
    assert second.status_code == 201, second.text
    assert second.json()["key"].startswith("pq_test_sk_")
    # only the secret starts with the prefix: a client taking the first pq_ string gets the key
    assert [k for k, v in second.json().items() if str(v).startswith("pq_")] == ["key"]
    third = client.post("/v1/keys", json={"name": "one too many"}, headers=headers)
    assert third.status_code == 409
    assert third.json()["error"]["code"] == "KEY_LIMIT_REACHED"


def test_revoked_key_is_rejected_and_identical_401_bodies(
    client: TestClient, services: Services
) -> None:
    org = new_organisation(services.database_url)
    admin = bearer(org.keys["development"].secret)
    created = client.post("/v1/keys", json={"name": "temp"}, headers=admin).json()
    assert client.get("/v1/keys", headers=bearer(created["key"])).status_code == 200
    assert client.delete(f"/v1/keys/{created['id']}", headers=admin).json()["status"] == "revoked"

    def error_without_id(headers: dict[str, str]) -> tuple[int, dict[str, object]]:
        response = client.get("/v1/keys", headers=headers)
        body = response.json()["error"]
        body.pop("requestId")
        return response.status_code, body

    import time

    time.sleep(2.5)  # the per-process key cache lives 2 s
    revoked = error_without_id(bearer(created["key"]))
    missing = error_without_id({})
    malformed = error_without_id(bearer("pq_live_sk_short"))
    unknown = error_without_id(bearer("pq_live_sk_" + "A" * 32))
    wrong_scheme = error_without_id({"Authorization": f"Basic {org.keys['development'].secret}"})
    assert revoked[0] == 401
    assert revoked == missing == malformed == unknown == wrong_scheme
    assert revoked[1]["code"] == "INVALID_API_KEY"


def test_key_without_admin_scope_gets_403(client: TestClient, services: Services) -> None:
    org = new_organisation(services.database_url)
    admin = bearer(org.keys["production"].secret)
    publisher = client.post("/v1/keys", json={"scopes": ["publish"]}, headers=admin).json()
    response = client.get("/v1/keys", headers=bearer(publisher["key"]))
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "FORBIDDEN"


def test_cannot_revoke_another_environments_key(client: TestClient, services: Services) -> None:
    org = new_organisation(services.database_url)
    other = new_organisation(services.database_url)
    dev = bearer(org.keys["development"].secret)
    same_project_other_env = org.keys["production"].key.id
    other_org_key = other.keys["development"].key.id
    for key_id in (same_project_other_env, other_org_key):
        response = client.delete(f"/v1/keys/{key_id}", headers=dev)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "KEY_NOT_FOUND"
    assert client.get("/v1/keys", headers=bearer(org.keys["production"].secret)).status_code == 200


def test_expiry_without_timezone_is_422_not_500(client: TestClient, services: Services) -> None:
    org = new_organisation(services.database_url)
    response = client.post(
        "/v1/keys",
        json={"expiresAt": "2099-01-01T00:00:00"},
        headers=bearer(org.keys["staging"].secret),
    )
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["field"] == "expiresAt"


def test_include_revoked_lists_revoked_keys(client: TestClient, services: Services) -> None:
    org = new_organisation(services.database_url)
    admin = bearer(org.keys["staging"].secret)
    extra = client.post("/v1/keys", json={"name": "old"}, headers=admin).json()
    client.delete(f"/v1/keys/{extra['id']}", headers=admin)
    active = client.get("/v1/keys", headers=admin).json()["keys"]
    everything = client.get("/v1/keys?includeRevoked=true", headers=admin).json()["keys"]
    assert extra["id"] not in [k["id"] for k in active]
    assert {k["id"]: k["status"] for k in everything}[extra["id"]] == "revoked"
