"""Dashboard sessions: login cookie, one answer for bad credentials, CSRF on logout, expiry."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from http.cookies import SimpleCookie
from typing import Any

import httpx
import psycopg
import pytest
from litestar.testing import TestClient

from tests.support.services import Services
from tests.support.tenancy import new_organisation

# The owner password tests.support.tenancy.new_organisation gives every owner.
OWNER_PASSWORD = "correct-horse-battery"


@pytest.fixture
def browser(client: TestClient) -> Iterator[TestClient]:
    """The shared client with an empty cookie jar, emptied again afterwards."""
    client.cookies.clear()
    yield client
    client.cookies.clear()


def login(browser: TestClient, email: str, password: str = OWNER_PASSWORD) -> httpx.Response:
    """``POST /auth/login``."""
    return browser.post("/auth/login", json={"email": email, "password": password})


def session_cookie(response: httpx.Response) -> SimpleCookie:
    """The ``qc_session`` cookie a response sets."""
    jar: SimpleCookie = SimpleCookie()
    for header in response.headers.get_list("set-cookie"):
        jar.load(header)
    assert "qc_session" in jar, response.headers
    return jar


def with_cookie(token: str) -> dict[str, str]:
    """Headers presenting a session token explicitly (the jar stays empty)."""
    return {"Cookie": f"qc_session={token}"}


def error_without_id(response: httpx.Response) -> tuple[int, dict[str, Any]]:
    """Status and error body minus the request id, to compare two answers."""
    body = dict(response.json()["error"])
    assert body.pop("requestId").startswith("req_")
    return response.status_code, body


def test_login_sets_an_httponly_cookie_that_opens_the_session(
    browser: TestClient, services: Services
) -> None:
    org = new_organisation(services.database_url)
    response = login(browser, org.owner_email.upper())
    assert response.status_code == 200, response.text
    morsel = session_cookie(response)["qc_session"]
    assert morsel["httponly"] is True
    assert morsel["samesite"].lower() == "lax"
    assert morsel["path"] == "/"
    assert not morsel["secure"]  # the test app's public URL is plain http
    assert len(morsel.value) >= 43  # 32 random bytes, URL-safe base64
    body = response.json()
    assert body["user"] == {"id": org.owner_id, "email": org.owner_email}
    assert body["organisations"] == [
        {"id": org.organisation.id, "name": org.organisation.name, "role": "owner"}
    ]
    assert len(body["csrfToken"]) >= 43

    current = browser.get("/auth/session")
    assert current.status_code == 200, current.text
    assert current.json() == body


def test_wrong_password_and_unknown_email_get_the_same_401(
    browser: TestClient, services: Services
) -> None:
    org = new_organisation(services.database_url)
    wrong_password = login(browser, org.owner_email, "not-the-password")
    unknown_email = login(browser, f"nobody-{org.organisation.id}@example.com")
    assert error_without_id(wrong_password) == error_without_id(unknown_email)
    assert error_without_id(wrong_password)[0] == 401
    assert wrong_password.json()["error"]["code"] == "INVALID_CREDENTIALS"
    assert not wrong_password.headers.get_list("set-cookie")
    assert browser.get("/auth/session").status_code == 401


def test_no_cookie_or_a_made_up_one_is_401_unauthorized(browser: TestClient) -> None:
    for headers in ({}, with_cookie("made-up-token")):
        response = browser.get("/auth/session", headers=headers)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "UNAUTHORIZED"


def test_logout_needs_the_csrf_token_then_ends_the_session_server_side(
    browser: TestClient, services: Services
) -> None:
    org = new_organisation(services.database_url)
    opened = login(browser, org.owner_email)
    token, csrf = session_cookie(opened)["qc_session"].value, opened.json()["csrfToken"]
    browser.cookies.clear()

    for headers in ({}, {"X-CSRF-Token": "wrong"}, {"X-CSRF-Token": csrf[:-1]}):
        refused = browser.post("/auth/logout", headers={**with_cookie(token), **headers})
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "CSRF_FAILED"
        assert browser.get("/auth/session", headers=with_cookie(token)).status_code == 200

    done = browser.post("/auth/logout", headers={**with_cookie(token), "X-CSRF-Token": csrf})
    assert done.status_code == 204, done.text
    cleared = session_cookie(done)["qc_session"]
    assert cleared.value == "" and cleared["max-age"] == "0"
    replayed = browser.get("/auth/session", headers=with_cookie(token))
    assert replayed.status_code == 401
    assert replayed.json()["error"]["code"] == "UNAUTHORIZED"
    assert session_rows(services, token) == 0


def test_logout_without_a_session_is_401(browser: TestClient) -> None:
    response = browser.post("/auth/logout", headers={"X-CSRF-Token": "anything"})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "UNAUTHORIZED"


def test_an_expired_session_is_rejected(browser: TestClient, services: Services) -> None:
    org = new_organisation(services.database_url)
    token = session_cookie(login(browser, org.owner_email))["qc_session"].value
    browser.cookies.clear()
    assert browser.get("/auth/session", headers=with_cookie(token)).status_code == 200
    with psycopg.connect(services.database_url) as conn:
        conn.execute(
            "UPDATE user_sessions SET expires_at = now() - interval '1 second'"
            " WHERE token_sha256 = %s",
            (hashlib.sha256(token.encode()).digest(),),
        )
    expired = browser.get("/auth/session", headers=with_cookie(token))
    assert expired.status_code == 401
    assert expired.json()["error"]["code"] == "UNAUTHORIZED"


def test_only_the_hash_of_the_session_token_is_stored(
    browser: TestClient, services: Services
) -> None:
    org = new_organisation(services.database_url)
    token = session_cookie(login(browser, org.owner_email))["qc_session"].value
    assert session_rows(services, token) == 1
    with psycopg.connect(services.database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM user_sessions s WHERE strpos(s::text, %s) > 0"
            " OR strpos(s::text, encode(convert_to(%s, 'UTF8'), 'hex')) > 0",
            (token, token),
        ).fetchone()
    assert row is not None and row[0] == 0


def session_rows(services: Services, token: str) -> int:
    """Rows of ``user_sessions`` whose hash is the SHA-256 of ``token``."""
    with psycopg.connect(services.database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM user_sessions WHERE token_sha256 = %s",
            (hashlib.sha256(token.encode()).digest(),),
        ).fetchone()
    assert row is not None
    return int(row[0])
