"""API key pages: hints only in lists, a new secret shown exactly once, the two-key limit, roles,
CSRF, and another organisation's keys out of reach."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import httpx
from litestar.testing import TestClient

from tenants.models import NewOrganisation
from tests.control_plane.dashboard.pages import (
    Browser,
    add_member,
    env_url,
    redirect_target,
    text_of,
)
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation

SECRET = re.compile(r"pq_(?:live|test)_sk_[0-9A-Za-z]{32}")
ALL_SCOPES = ["publish", "consume", "admin"]


def create_key(
    browser: Browser, org: NewOrganisation, env: str, name: str, scopes: list[str]
) -> httpx.Response:
    return browser.post(env_url(org, env, "keys"), {"name": name, "scopes": scopes})


def test_a_new_keys_secret_is_shown_exactly_once_and_works_against_the_api(
    owner: Browser, org: NewOrganisation, client: TestClient
) -> None:
    created = create_key(owner, org, "production", "billing-service", ALL_SCOPES)
    assert created.status_code == 201, created.text
    assert created.headers["cache-control"] == "no-store"
    secrets_on_page = SECRET.findall(created.text)
    assert len(secrets_on_page) == 1, secrets_on_page
    secret = secrets_on_page[0]
    assert secret.startswith("pq_live_sk_")
    assert "it is not shown again" in text_of(created)

    listed = owner.get(env_url(org, "production", "keys"))
    assert listed.status_code == 200
    assert SECRET.findall(listed.text) == []
    assert f"…{secret[-4:]}" in text_of(listed)  # the hint
    assert "billing-service" in listed.text

    response = client.get("/v1/topics", headers=bearer(secret))
    assert response.status_code == 200, response.text


def test_the_two_active_keys_limit_is_explained_and_revoking_makes_room(
    owner: Browser, org: NewOrganisation, client: TestClient
) -> None:
    # The organisation's default key is the first of two.
    assert create_key(owner, org, "staging", "second", ALL_SCOPES).status_code == 201
    refused = create_key(owner, org, "staging", "third", ALL_SCOPES)
    assert refused.status_code == 409
    text = text_of(refused)
    assert "already has 2 active keys" in text
    assert "rotate without downtime" in text
    assert SECRET.findall(refused.text) == []

    default_key = org.keys["staging"]
    revoked = owner.post(env_url(org, "staging", "keys", default_key.key.id, "revoke"))
    assert redirect_target(revoked) == env_url(org, "staging", "keys") + "?notice=key-revoked"
    page = text_of(owner.get(redirect_target(revoked)))
    assert "The API key was revoked" in page
    assert "Revoked and expired keys" in page

    assert create_key(owner, org, "staging", "third", ALL_SCOPES).status_code == 201
    deadline = time.monotonic() + 10  # every replica drops a revoked key within a few seconds
    while client.get("/v1/topics", headers=bearer(default_key.secret)).status_code != 401:
        assert time.monotonic() < deadline, "the revoked key still works"
        time.sleep(0.2)


def test_a_key_gets_only_the_scopes_chosen_and_at_least_one(
    owner: Browser, org: NewOrganisation, client: TestClient
) -> None:
    none_chosen = create_key(owner, org, "development", "nothing", [])
    assert none_chosen.status_code == 422
    assert "choose at least one scope" in text_of(none_chosen)

    created = create_key(owner, org, "development", "publisher", ["publish"])
    assert created.status_code == 201
    [secret] = SECRET.findall(created.text)
    assert client.get("/v1/topics", headers=bearer(secret)).status_code == 403  # admin scope


def test_creating_or_revoking_a_key_without_the_csrf_token_is_refused(
    owner: Browser, org: NewOrganisation
) -> None:
    forged = owner.post_without_csrf(
        env_url(org, "development", "keys"), {"name": "forged", "scopes": ALL_SCOPES}
    )
    assert forged.status_code == 403
    assert SECRET.findall(forged.text) == []
    key_id = org.keys["development"].key.id
    revoke = owner.post_without_csrf(env_url(org, "development", "keys", key_id, "revoke"))
    assert revoke.status_code == 403
    page = owner.get(env_url(org, "development", "keys")).text
    assert "forged" not in page
    assert "Revoked and expired keys" not in page


def test_only_owners_and_admins_manage_keys_while_everyone_sees_them(
    org: NewOrganisation, services: Services, browser: Callable[[], Browser]
) -> None:
    key_id = org.keys["development"].key.id
    for role, allowed in (("admin", True), ("developer", False), ("viewer", False)):
        member = browser()
        member.login(add_member(services.database_url, org, role).email)
        page = member.get(env_url(org, "development", "keys"))
        assert page.status_code == 200
        assert org.keys["development"].key.hint in text_of(page)
        assert ("Create a key" in page.text) is allowed
        created = create_key(member, org, "development", f"by-{role}", ["publish"])
        if allowed:
            assert created.status_code == 201
            assert len(SECRET.findall(created.text)) == 1
            continue
        revoked = member.post(env_url(org, "development", "keys", key_id, "revoke"))
        for refused in (created, revoked):
            assert refused.status_code == 403
            text = text_of(refused)
            assert f"Your role in {org.organisation.name} is {role}" in text
            assert "create or revoke API keys" in text
            assert SECRET.findall(refused.text) == []
    # The developer and viewer revoked nothing; the admin's new key sits beside the default one.
    listed = text_of(browser_for_owner(browser, org).get(env_url(org, "development", "keys")))
    assert "by-admin" in listed and "by-developer" not in listed and "by-viewer" not in listed
    assert "Revoked and expired keys" not in listed


def browser_for_owner(browser: Callable[[], Browser], org: NewOrganisation) -> Browser:
    signed_in = browser()
    signed_in.login(org.owner_email)
    return signed_in


def test_another_organisations_keys_are_not_found_whatever_the_ids(
    owner: Browser, org: NewOrganisation, services: Services, browser: Callable[[], Browser]
) -> None:
    other = new_organisation(services.database_url)
    theirs_env = other.project.environment("development").id
    theirs_key = other.keys["development"].key.id
    mine = owner.get(env_url(org, "development", "keys"))
    assert mine.status_code == 200

    for response in (
        owner.get(f"/dashboard/envs/{theirs_env}/keys"),
        owner.post(f"/dashboard/envs/{theirs_env}/keys", {"name": "x", "scopes": ALL_SCOPES}),
        owner.post(f"/dashboard/envs/{theirs_env}/keys/{theirs_key}/revoke"),
        # their key through my environment: not in my environment, so not found either
        owner.post(env_url(org, "development", "keys", theirs_key, "revoke")),
    ):
        assert response.status_code == 404, response.text
        assert "<h1>Not found</h1>" in response.text
        assert other.keys["development"].key.hint not in text_of(response)
    listing = text_of(browser_for_owner(browser, other).get(f"/dashboard/envs/{theirs_env}/keys"))
    assert "Revoked and expired keys" not in listing
    assert "Active keys (1 of 2)" in listing
