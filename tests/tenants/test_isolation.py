"""Tenant isolation of the key routes: other organisations and environments see nothing."""

from __future__ import annotations

import pytest
from litestar.testing import TestClient

from tenants.models import ENVIRONMENT_NAMES, NewOrganisation
from tests.support.isolation import assert_hidden_from_strangers, assert_isolated
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation


def create_key(client: TestClient, org: NewOrganisation, env: str) -> dict[str, str]:
    """A second key in ``env`` of ``org``, created over HTTP."""
    response = client.post(
        "/v1/keys", json={"name": "isolated"}, headers=bearer(org.keys[env].secret)
    )
    assert response.status_code == 201, response.text
    return dict(response.json())


@pytest.mark.parametrize("env", ["production", "staging"])
def test_revoking_a_key_is_isolated(client: TestClient, services: Services, env: str) -> None:
    owner, stranger = (
        new_organisation(services.database_url),
        new_organisation(services.database_url),
    )
    key = create_key(client, owner, env)
    response = assert_isolated(client, owner, stranger, "DELETE", f"/v1/keys/{key['id']}", env=env)
    assert response.json()["id"] == key["id"]
    assert response.json()["status"] == "revoked"


def test_a_strangers_revoke_leaves_the_key_working(client: TestClient, services: Services) -> None:
    owner, stranger = (
        new_organisation(services.database_url),
        new_organisation(services.database_url),
    )
    key = create_key(client, owner, "production")
    assert_hidden_from_strangers(
        client, owner, stranger, "DELETE", f"/v1/keys/{key['id']}", code="KEY_NOT_FOUND"
    )
    assert client.get("/v1/keys", headers=bearer(key["key"])).status_code == 200


def test_the_helper_fails_for_a_route_that_is_not_isolated(
    client: TestClient, services: Services
) -> None:
    owner, stranger = (
        new_organisation(services.database_url),
        new_organisation(services.database_url),
    )
    # Every key may list its own environment's keys: a 200 for strangers is not a 404.
    with pytest.raises(AssertionError, match="expected 404, got 200"):
        assert_isolated(client, owner, stranger, "GET", "/v1/keys")
    # A resource that does not exist fails the owner's control.
    with pytest.raises(AssertionError, match="control failed"):
        assert_isolated(client, owner, stranger, "DELETE", "/v1/keys/key_doesnotexist000")


def test_listing_shows_only_the_callers_environment(client: TestClient, services: Services) -> None:
    owner, stranger = (
        new_organisation(services.database_url),
        new_organisation(services.database_url),
    )
    revoked = create_key(client, owner, "staging")
    admin = bearer(owner.keys["staging"].secret)
    assert client.delete(f"/v1/keys/{revoked['id']}", headers=admin).status_code == 200
    expected = {
        (org.organisation.id, env): {org.keys[env].key.id}
        for org in (owner, stranger)
        for env in ENVIRONMENT_NAMES
    }
    expected[(owner.organisation.id, "staging")].add(revoked["id"])
    every_key = set().union(*expected.values())
    for org in (owner, stranger):
        for env in ENVIRONMENT_NAMES:
            listed = listed_ids(client, org.keys[env].secret)
            assert listed == expected[(org.organisation.id, env)], (org.organisation.id, env)
            assert not (listed & (every_key - expected[(org.organisation.id, env)]))


def listed_ids(client: TestClient, secret: str) -> set[str]:
    """Ids listed by ``GET /v1/keys?includeRevoked=true`` for a key."""
    response = client.get("/v1/keys", params={"includeRevoked": "true"}, headers=bearer(secret))
    assert response.status_code == 200, response.text
    assert secret not in response.text
    return {key["id"] for key in response.json()["keys"]}
