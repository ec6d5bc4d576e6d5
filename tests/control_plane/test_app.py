"""The API skeleton: probes, request ids, the error body for every kind of error, OpenAPI."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from typing import Annotated, Any

import msgspec
import pytest
from litestar import get, post
from litestar.params import Body
from litestar.testing import TestClient

from core import settings
from observability import logging as qc_logging
from tests.support.services import Services

REQUEST_ID = re.compile(r"^req_[A-Za-z0-9]{24}$")


class Widget(msgspec.Struct, rename="camel"):
    """A body with typed, bounded fields, standing in for real request schemas."""

    name: str
    part_count: int


@post("/test/widgets")
async def create_widget(data: Annotated[Widget, Body()]) -> dict[str, Any]:
    """Echo a valid body."""
    return {"name": data.name, "partCount": data.part_count}


@get("/test/boom")
async def boom() -> None:
    """Fail the way a bug would."""
    raise RuntimeError("secret internal detail: password=hunter2")


@get("/test/deadlock")
async def deadlock() -> None:
    """Fail the way PostgreSQL reports a deadlock."""
    import psycopg

    raise psycopg.errors.DeadlockDetected("deadlock detected")


@get("/test/log")
async def log_something() -> dict[str, str]:
    """Log from inside a handler, as real handlers do."""
    qc_logging.get_logger("test").info("widget_inspected", widget="w1")
    return {"status": "logged"}


@pytest.fixture(scope="module")
def app_client(services: Services) -> Iterator[tuple[TestClient, io.StringIO]]:
    """The real application plus test-only routes, logging JSON into a buffer we can read."""
    from control_plane.app import create_app

    app = create_app(extra_route_handlers=[create_widget, boom, log_something, deadlock])
    stream = io.StringIO()
    qc_logging.configure(settings.LogSettings(level="INFO", format="json"), stream=stream)
    with TestClient(app=app, raise_server_exceptions=False) as client:
        yield client, stream


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    """The documented error body, with the same request id as the header."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body["error"]) >= {"code", "message", "status", "requestId"}
    assert body["error"]["code"] == code
    assert body["error"]["status"] == status
    assert body["error"]["requestId"] == response.headers["x-request-id"]
    assert REQUEST_ID.match(response.headers["x-request-id"])
    return dict(body["error"])


def test_healthz_answers_ok_with_request_id(app_client: tuple[TestClient, io.StringIO]) -> None:
    client, _ = app_client
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert REQUEST_ID.match(response.headers["x-request-id"])


def test_request_ids_differ_per_request(app_client: tuple[TestClient, io.StringIO]) -> None:
    client, _ = app_client
    ids = {client.get("/healthz").headers["x-request-id"] for _ in range(5)}
    assert len(ids) == 5


def test_readyz_reports_every_dependency(app_client: tuple[TestClient, io.StringIO]) -> None:
    client, _ = app_client
    response = client.get("/readyz")
    assert response.status_code == 200, response.text
    assert response.json()["checks"] == {"postgres": "ok", "s3": "ok", "redis": "ok"}


def test_unknown_route_is_404_error_body(app_client: tuple[TestClient, io.StringIO]) -> None:
    client, _ = app_client
    error = assert_error(client.get("/v1/nothing-here"), 404, "NOT_FOUND")
    assert "/v1/nothing-here" in error["message"]


def test_wrong_method_is_405_error_body(app_client: tuple[TestClient, io.StringIO]) -> None:
    client, _ = app_client
    assert_error(client.delete("/healthz"), 405, "METHOD_NOT_ALLOWED")


def test_malformed_json_is_400(app_client: tuple[TestClient, io.StringIO]) -> None:
    client, _ = app_client
    response = client.post(
        "/test/widgets", content=b'{"name": "a", ', headers={"content-type": "application/json"}
    )
    error = assert_error(response, 400, "VALIDATION_ERROR")
    assert "JSON" in error["message"]


def test_wrong_field_type_is_422_naming_the_field(
    app_client: tuple[TestClient, io.StringIO],
) -> None:
    client, _ = app_client
    response = client.post("/test/widgets", json={"name": "a", "partCount": "three"})
    error = assert_error(response, 422, "VALIDATION_ERROR")
    assert "partCount" in error["message"]
    assert error["details"][0]["field"] == "partCount"


def test_missing_field_is_422_naming_the_field(app_client: tuple[TestClient, io.StringIO]) -> None:
    client, _ = app_client
    error = assert_error(client.post("/test/widgets", json={"name": "a"}), 422, "VALIDATION_ERROR")
    assert "partCount" in error["message"]
    assert error["details"][0]["field"] == "partCount"


def test_valid_body_passes(app_client: tuple[TestClient, io.StringIO]) -> None:
    client, _ = app_client
    response = client.post("/test/widgets", json={"name": "a", "partCount": 3})
    assert response.status_code == 201
    assert response.json() == {"name": "a", "partCount": 3}


def test_unexpected_exception_is_500_without_trace_but_logged_with_one(
    app_client: tuple[TestClient, io.StringIO],
) -> None:
    client, stream = app_client
    response = client.get("/test/boom")
    error = assert_error(response, 500, "INTERNAL_ERROR")
    assert "hunter2" not in response.text
    assert "Traceback" not in response.text
    lines = [json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{")]
    logged = [line for line in lines if line.get("request_id") == error["requestId"]]
    assert logged, "the failure was not logged with its request id"
    assert any(
        "Traceback" in line.get("exception", "") and "RuntimeError" in line["exception"]
        for line in logged
    )


def test_log_lines_inside_a_handler_carry_the_request_id(
    app_client: tuple[TestClient, io.StringIO],
) -> None:
    client, stream = app_client
    rid = client.get("/test/log").headers["x-request-id"]
    lines = [json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{")]
    mine = [line for line in lines if line.get("event") == "widget_inspected"]
    assert mine and mine[-1]["request_id"] == rid
    assert {"timestamp", "level", "logger"} <= set(mine[-1])


def test_incoming_request_id_is_kept_only_when_well_formed(
    app_client: tuple[TestClient, io.StringIO],
) -> None:
    client, _ = app_client
    good = "req_clientSuppliedId123"
    assert client.get("/healthz", headers={"X-Request-Id": good}).headers["x-request-id"] == good
    forged = client.get("/healthz", headers={"X-Request-Id": "req_x\n{fake}"}).headers[
        "x-request-id"
    ]
    assert REQUEST_ID.match(forged)


def test_openapi_schema_lists_the_probes(app_client: tuple[TestClient, io.StringIO]) -> None:
    client, _ = app_client
    response = client.get("/schema/openapi.json")
    assert response.status_code == 200
    schema = response.json()
    assert schema["info"]["title"] == "QueueCore API"
    assert {"/healthz", "/readyz"} <= set(schema["paths"])


def test_interactive_docs_are_served(app_client: tuple[TestClient, io.StringIO]) -> None:
    client, _ = app_client
    response = client.get("/schema")
    assert response.status_code == 200
    assert "text/html" in response.headers["content-type"]
    assert "openapi.json" in response.text


def test_client_hanging_up_mid_body_is_not_logged_as_a_server_error(
    app_client: tuple[TestClient, io.StringIO],
) -> None:
    client, stream = app_client
    incoming = [
        {"type": "http.request", "body": b'{"name": "a", ', "more_body": True},
        {"type": "http.disconnect"},
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/test/widgets",
        "raw_path": b"/test/widgets",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"100")],
        "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
        "state": {},
    }
    assert client.blocking_portal is not None
    client.blocking_portal.call(client.app, scope, receive, send)
    assert sent[0]["status"] == 400
    lines = [json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{")]
    assert any(line.get("event") == "client_disconnected" for line in lines)
    assert not any(
        line.get("event") == "server_error" and "disconnected" in str(line.get("error"))
        for line in lines
    )


def test_a_database_deadlock_is_a_retryable_503_not_an_outage(
    app_client: tuple[TestClient, io.StringIO],
) -> None:
    client, _ = app_client
    response = client.get("/test/deadlock")
    error = assert_error(response, 503, "SERVICE_UNAVAILABLE")
    assert "Retry" in error["message"] and "cannot reach" not in error["message"]
    assert response.headers["retry-after"] == "1"
