"""Request bodies at the edge: a JSON endpoint reads only a body declared JSON (415 otherwise, so
a cross-site ``text/plain`` form cannot sign a browser in), a JSON object with a key twice is
refused, and the anonymous dashboard forms check their cookie, size and field count before they
read or parse anything (a real ``queuecore serve`` over raw sockets: the server answers without
waiting for a body it will not read).
"""

from __future__ import annotations

import json
import secrets
import socket
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
from litestar.testing import TestClient

from control_plane.edge.bodies import FORM_MAX_FIELDS, SIGN_IN_FORM_MAX_BYTES
from tenants.models import NewOrganisation
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation

NOT_JSON = {
    "text/plain": "text/plain",
    "xml": "application/xml",
    "form": "application/x-www-form-urlencoded",
    "multipart": "multipart/form-data; boundary=x",
    "none": None,
}


@pytest.fixture(scope="module")
def org(services: Services) -> NewOrganisation:
    return new_organisation(services.database_url, tier="pro")


@pytest.fixture(scope="module")
def topic(client: TestClient, org: NewOrganisation) -> str:
    name = f"bodies-{secrets.token_hex(4)}"
    key = bearer(org.keys["production"].secret)
    assert client.post("/v1/topics", json={"name": name}, headers=key).status_code == 201
    return name


def post_raw(
    client: TestClient, path: str, body: bytes, content_type: str | None, **kw: Any
) -> Any:
    headers = dict(kw.pop("headers", {}))
    if content_type is not None:
        headers["Content-Type"] = content_type
    return client.post(path, content=body, headers=headers, **kw)


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert (error["code"], error["status"]) == (code, status)
    assert error["requestId"] == response.headers["x-request-id"]
    return error


@pytest.mark.parametrize("content_type", NOT_JSON.values(), ids=NOT_JSON.keys())
def test_a_json_endpoint_refuses_a_body_not_declared_json(
    client: TestClient, org: NewOrganisation, topic: str, content_type: str | None
) -> None:
    body = json.dumps({"data": {"n": 1}}).encode()
    key = bearer(org.keys["production"].secret)
    response = post_raw(client, f"/v1/topics/{topic}/messages", body, content_type, headers=key)
    assert_error(response, 415, "UNSUPPORTED_MEDIA_TYPE")
    page = client.get(f"/v1/topics/{topic}/partitions/0/messages", headers=key).json()
    assert page["messages"] == []  # nothing was published


def test_json_with_a_charset_or_a_structured_json_type_is_read(
    client: TestClient, org: NewOrganisation, topic: str
) -> None:
    key = bearer(org.keys["production"].secret)
    for content_type in ("application/json; charset=utf-8", "application/vnd.queuecore+json"):
        body = json.dumps({"data": content_type}).encode()
        published = post_raw(
            client, f"/v1/topics/{topic}/messages", body, content_type, headers=key
        )
        assert published.status_code == 201, published.text


def test_a_text_plain_sign_in_sets_no_session(client: TestClient, org: NewOrganisation) -> None:
    """Login CSRF: a cross-site form can post text/plain without a preflight."""
    credentials = json.dumps({"email": org.owner_email, "password": "correct-horse-battery"})
    refused = post_raw(client, "/auth/login", credentials.encode(), "text/plain")
    assert_error(refused, 415, "UNSUPPORTED_MEDIA_TYPE")
    assert "set-cookie" not in refused.headers
    client.cookies.clear()
    signed_in = post_raw(client, "/auth/login", credentials.encode(), "application/json")
    assert signed_in.status_code == 200 and "qc_session" in signed_in.headers["set-cookie"]
    client.cookies.clear()


REPEATED = {
    "top level": b'{"data": 1, "data": 2}',
    "inside data": b'{"data": {"amount": 1, "amount": 1000000}}',
    "escaped, read again exactly": b'{"data": {"caf\\u00e9": 1, "caf\\u00e9": 2}}',
    "escaped spelling of the same key": b'{"data": 1, "d\\u0061ta": 2}',
}


@pytest.mark.parametrize("body", REPEATED.values(), ids=REPEATED.keys())
def test_a_json_object_with_a_key_twice_is_refused(
    client: TestClient, org: NewOrganisation, topic: str, body: bytes
) -> None:
    key = bearer(org.keys["production"].secret)
    response = post_raw(
        client, f"/v1/topics/{topic}/messages", body, "application/json", headers=key
    )
    error = assert_error(response, 400, "VALIDATION_ERROR")
    assert "twice" in error["message"]


def test_unique_keys_pass_whatever_the_spelling(
    client: TestClient, org: NewOrganisation, topic: str
) -> None:
    key = bearer(org.keys["production"].secret)
    for body in (
        b'{"data": {"caf\\u00e9": 1, "cafe": 2}, "key": "a"}',  # escapes: read again, exactly
        b'{\n  "data": [1.50, 1e2, {"a": {}}],\n  "key": "b"\n}\n',  # spacing, number forms
        b'{"messages": [{"data": {"k": 1}}, {"data": {"k": 1}}]}',  # one key in two objects
    ):
        path = f"/v1/topics/{topic}/messages" + ("/batch" if b"messages" in body else "")
        published = post_raw(client, path, body, "application/json", headers=key)
        assert published.status_code == 201, published.text


def test_an_ack_with_its_ids_twice_is_refused(
    client: TestClient, org: NewOrganisation, topic: str
) -> None:
    key = bearer(org.keys["production"].secret)
    body = b'{"ackIds": ["a"], "ackIds": ["b"]}'
    path = f"/v1/topics/{topic}/groups/g/ack"
    assert_error(
        post_raw(client, path, body, "application/json", headers=key), 400, "VALIDATION_ERROR"
    )


# --- the anonymous forms, on a real server ----------------------------------------------------


def answer_to_head(api: str, head: bytes) -> bytes:
    """Send a request head alone (its body never follows) and read the answer."""
    parts = urlsplit(api)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(head)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
                if b"\r\n\r\n" in b"".join(chunks):
                    break
        except TimeoutError:
            pass  # what was read so far is the answer: nothing, if the server waited
        return b"".join(chunks)


def status_of(answer: bytes) -> int | None:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else None


def form_head(path: str, length: int, cookie: str | None, content_type: str) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: x",
        f"Content-Type: {content_type}",
        f"Content-Length: {length}",
        "Connection: close",
    ]
    if cookie is not None:
        lines.append(f"Cookie: qc_form_csrf={cookie}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


FORMS = ["/dashboard/login", "/dashboard/signup"]
URLENCODED = "application/x-www-form-urlencoded"


@pytest.mark.parametrize("path", FORMS)
def test_a_form_without_its_cookie_is_refused_before_its_body_is_read(api: str, path: str) -> None:
    answer = answer_to_head(api, form_head(path, 1_000_000, None, URLENCODED))
    assert status_of(answer) == 403, answer[:300]


@pytest.mark.parametrize("path", FORMS)
def test_a_form_over_its_size_is_refused_before_its_body_is_read(api: str, path: str) -> None:
    cookie = secrets.token_urlsafe(32)
    answer = answer_to_head(api, form_head(path, 8_900_000, cookie, URLENCODED))
    assert status_of(answer) == 413, answer[:300]


@pytest.mark.parametrize("path", FORMS)
def test_a_form_with_too_many_fields_or_not_urlencoded_is_refused(api: str, path: str) -> None:
    import httpx

    cookie = secrets.token_urlsafe(32)
    fields = urlencode([("csrf_token", cookie)] + [(f"f{n}", "x") for n in range(FORM_MAX_FIELDS)])
    assert len(fields) < SIGN_IN_FORM_MAX_BYTES
    with httpx.Client(base_url=api, cookies={"qc_form_csrf": cookie}) as http:
        many = http.post(path, content=fields, headers={"Content-Type": URLENCODED})
        assert many.status_code == 413, many.text[:300]
        multipart = http.post(path, files={"csrf_token": (None, cookie)})
        assert multipart.status_code == 403, multipart.text[:300]  # never read: no token in it
        assert http.get("/healthz").status_code == 200
