"""The alert endpoint page: set (secret once), change, rotate, delete; roles, CSRF, isolation."""

from __future__ import annotations

import re
from collections.abc import Callable

from tenants.models import NewOrganisation
from tests.control_plane.dashboard.pages import (
    Browser,
    add_member,
    env_url,
    redirect_target,
    text_of,
)
from tests.support.services import Services
from tests.support.tenancy import new_organisation

SECRET = re.compile(r"whsec_[0-9A-Za-z]{32}")
HOOK = "http://127.0.0.1:9/hooks/queuecore"


def alerts(org: NewOrganisation, *parts: str) -> str:
    return env_url(org, "staging", "alerts", *parts)


def test_set_change_rotate_and_delete_the_endpoint_with_each_secret_shown_once(
    owner: Browser, org: NewOrganisation
) -> None:
    empty = owner.get(alerts(org))
    assert empty.status_code == 200 and "No alert endpoint is set" in empty.text

    created = owner.post(alerts(org), {"url": HOOK})
    assert created.status_code == 201
    assert created.headers["cache-control"] == "no-store"
    [secret] = SECRET.findall(created.text)
    assert "it is not shown again" in text_of(created)

    shown = owner.get(alerts(org))
    assert SECRET.findall(shown.text) == []
    assert f"whsec_…{secret[-4:]}" in text_of(shown)
    assert f">{HOOK}<" in shown.text

    changed = owner.post(alerts(org), {"url": HOOK + "/v2"})
    assert redirect_target(changed) == alerts(org) + "?notice=alert-saved"
    after_change = owner.get(redirect_target(changed))
    assert f">{HOOK}/v2<" in after_change.text and SECRET.findall(after_change.text) == []
    assert f"whsec_…{secret[-4:]}" in text_of(after_change)  # same secret

    rotated = owner.post(alerts(org, "rotate"))
    assert rotated.status_code == 200
    [new_secret] = SECRET.findall(rotated.text)
    assert new_secret != secret
    assert SECRET.findall(owner.get(alerts(org)).text) == []

    deleted = owner.post(alerts(org, "delete"))
    assert redirect_target(deleted) == alerts(org) + "?notice=alert-deleted"
    assert "No alert endpoint is set" in owner.get(alerts(org)).text
    assert owner.post(alerts(org, "rotate")).status_code == 404  # nothing left to rotate


def test_a_bad_url_is_explained_and_kept_in_the_form(owner: Browser, org: NewOrganisation) -> None:
    response = owner.post(alerts(org), {"url": "ftp://example.com/hook"})
    assert response.status_code == 422
    assert "must be an http or https URL" in text_of(response)
    assert 'value="ftp://example.com/hook"' in response.text
    assert SECRET.findall(response.text) == []


def test_viewers_cannot_change_the_endpoint_developers_can(
    org: NewOrganisation, services: Services, browser: Callable[[], Browser]
) -> None:
    viewer, developer = browser(), browser()
    viewer.login(add_member(services.database_url, org, "viewer").email)
    developer.login(add_member(services.database_url, org, "developer").email)
    assert developer.post(alerts(org), {"url": HOOK}).status_code == 201

    page = viewer.get(alerts(org))
    assert page.status_code == 200 and f">{HOOK}<" in page.text and "Rotate secret" not in page.text
    for path, data in (
        (alerts(org), {"url": HOOK + "/evil"}),
        (alerts(org, "rotate"), {}),
        (alerts(org, "delete"), {}),
    ):
        refused = viewer.post(path, data)
        assert refused.status_code == 403
        assert "to change the alert endpoint" in text_of(refused)
        assert SECRET.findall(refused.text) == []
    assert f">{HOOK}<" in viewer.get(alerts(org)).text


def test_changes_need_the_csrf_token_and_other_organisations_see_nothing(
    owner: Browser, org: NewOrganisation, services: Services, browser: Callable[[], Browser]
) -> None:
    assert owner.post_without_csrf(alerts(org), {"url": HOOK}).status_code == 403
    assert "No alert endpoint is set" in owner.get(alerts(org)).text
    assert owner.post(alerts(org), {"url": HOOK}).status_code == 201

    outsider = browser()
    outsider.login(new_organisation(services.database_url).owner_email)
    for response in (
        outsider.get(alerts(org)),
        outsider.post(alerts(org), {"url": HOOK + "/stolen"}),
        outsider.post(alerts(org, "rotate")),
        outsider.post(alerts(org, "delete")),
    ):
        assert response.status_code == 404
        assert HOOK not in response.text
    assert f">{HOOK}<" in owner.get(alerts(org)).text
