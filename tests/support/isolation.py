"""Proving tenant isolation of a route: strangers get the documented 404, the owner does not.

Usage, for a resource created with ``owner``'s production key at ``path``::

    assert_isolated(client, owner, stranger, "DELETE", f"/v1/keys/{key_id}")

``stranger`` is another organisation (``new_organisation(...)``). The helper sends the same
request with the production key of ``stranger`` and with the owner's own keys for the other
environments of the same project; each must get ``404`` with the body
``{"error": {code, message, status, requestId}}`` (``code`` ending in ``NOT_FOUND``, or the one
given) and no id of the owner's organisation, project or environment in it. Then, as the control
that lets the test fail, the owner's key sends it and must succeed. Strangers go first, so a
destructive route (``DELETE``) is still intact for the control.

Routes whose control needs a different request (or a check in between) can call
:func:`assert_hidden_from_strangers` and make the owner's request themselves.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from tenants.models import ENVIRONMENT_NAMES, NewOrganisation
from tests.support.tenancy import bearer

Client = httpx.Client | str
REQUEST_ID = re.compile(r"^req_[A-Za-z0-9]{8,64}$")


def assert_isolated(
    client: Client,
    owner: NewOrganisation,
    stranger: NewOrganisation,
    method: str,
    path: str,
    *,
    json: Any = None,
    env: str = "production",
    code: str | None = None,
) -> httpx.Response:
    """Strangers get the documented 404 on ``method path``; the owner's ``env`` key gets a 2xx.

    Returns the owner's response, for assertions about what the route did.
    """
    assert_hidden_from_strangers(
        client, owner, stranger, method, path, json=json, env=env, code=code
    )
    response = _send(client, method, path, owner.keys[env].secret, json)
    assert 200 <= response.status_code < 300, (
        f"control failed: the owner's {env} key got {response.status_code} on {method} {path}: "
        f"{response.text}"
    )
    return response


def assert_hidden_from_strangers(
    client: Client,
    owner: NewOrganisation,
    stranger: NewOrganisation,
    method: str,
    path: str,
    *,
    json: Any = None,
    env: str = "production",
    code: str | None = None,
) -> dict[str, httpx.Response]:
    """Another organisation's key and the owner's other environments' keys all get 404.

    Returns the responses by who sent them (``"other organisation"``, ``"development"``, …).
    """
    assert stranger.organisation.id != owner.organisation.id, "the stranger must be another org"
    env_id = owner.project.environment(env).id
    # What each caller must not learn from the 404: another organisation nothing of the owner's.
    callers = {"other organisation": (stranger.keys[env].secret, _owner_ids(owner, env))} | {
        name: (owner.keys[name].secret, {env_id}) for name in ENVIRONMENT_NAMES if name != env
    }
    responses = {}
    for who, (secret, hidden) in callers.items():
        response = _send(client, method, path, secret, json)
        _assert_documented_404(response, f"{who} on {method} {path}", code, hidden)
        responses[who] = response
    return responses


def _assert_documented_404(
    response: httpx.Response, what: str, code: str | None, hidden: set[str]
) -> None:
    assert response.status_code == 404, (
        f"{what}: expected 404, got {response.status_code}: {response.text}"
    )
    error = response.json()["error"]
    assert set(error) >= {"code", "message", "status", "requestId"}, f"{what}: {error}"
    assert error["status"] == 404, f"{what}: {error}"
    expected = error["code"] == code if code else error["code"].endswith("NOT_FOUND")
    assert expected, f"{what}: unexpected code in {error}"
    assert REQUEST_ID.match(error["requestId"]), f"{what}: {error}"
    assert error["requestId"] == response.headers.get("x-request-id"), f"{what}: {error}"
    leaked = sorted(value for value in hidden if value in response.text)
    assert not leaked, f"{what}: the 404 reveals the owner's ids {leaked}: {response.text}"


def _owner_ids(owner: NewOrganisation, env: str) -> set[str]:
    return {owner.organisation.id, owner.project.id, owner.project.environment(env).id}


def _send(client: Client, method: str, path: str, secret: str, json: Any) -> httpx.Response:
    if isinstance(client, str):
        with httpx.Client(base_url=client, timeout=30) as http:
            return _send(http, method, path, secret, json)
    return client.request(method, path, headers=bearer(secret), json=json)
