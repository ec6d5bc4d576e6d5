"""A real ``queuecore serve`` exporting to a local OTLP receiver, as it would to GreptimeDB."""

from __future__ import annotations

import secrets
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.observability.conftest import (
    AUTHORIZATION,
    DB_NAME,
    LOG_TABLE,
    Server,
    disconnect_mid_body,
    exporting_env,
    serve,
)
from tests.observability.receiver import OtlpReceiver, eventually
from tests.support.services import Services
from tests.support.tenancy import new_organisation

pytestmark = pytest.mark.e2e

PUBLISH_ROUTE = "/v1/topics/{topic}/messages"
CATALOGUE = {
    "http.server.request.duration",
    "queuecore.messages.published",
    "queuecore.messages.published.size",
    "queuecore.writer.flush.duration",
    "queuecore.writer.flush.size",
    "queuecore.writer.flush.messages",
    "queuecore.object_store.duration",
    "queuecore.db.statement.duration",
}


@pytest.fixture(scope="module")
def live(
    services: Services, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, OtlpReceiver]]:
    """One API process exporting every 300 ms, shared by this module's tests."""
    receiver = OtlpReceiver().start()
    log = tmp_path_factory.mktemp("otlp") / "serve.log"
    with serve(services, log, exporting_env(receiver, interval_ms=300)) as server:
        yield server, receiver
    receiver.stop()


def tenant(
    server: Server, services: Services, unique: Callable[[str], str], **topic: Any
) -> tuple[httpx.Client, str, str]:
    """A fresh organisation's production key, a client using it, and a new topic."""
    org = new_organisation(services.database_url, tier="pro")
    secret = org.keys["production"].secret
    client = httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {secret}"}, timeout=30
    )
    name = unique("otlp")
    created = client.post("/v1/topics", json={"name": name, "partitions": 2, **topic})
    assert created.status_code == 201, created.text
    return client, secret, name


def test_metrics_are_exported_periodically_to_the_greptimedb_path_with_its_headers(
    live: tuple[Server, OtlpReceiver], services: Services, unique: Callable[[str], str]
) -> None:
    server, receiver = live
    client, _, topic = tenant(server, services, unique)
    for n in range(3):
        assert client.post(f"/v1/topics/{topic}/messages", json={"data": n}).status_code == 201

    eventually(
        lambda: (
            receiver.total("http.server.request.duration", **{"http.route": PUBLISH_ROUTE}) >= 3
        ),
        20,
        "the publishes' request durations exported while the server runs",
    )
    eventually(lambda: receiver.metric_names() >= CATALOGUE, 20, "the catalogue's metrics")
    exports = receiver.of("metrics")
    assert {export.path for export in exports} == {"/v1/otlp/v1/metrics"}
    for export in exports:
        assert export.headers["x-greptime-db-name"] == DB_NAME
        assert export.headers["authorization"] == AUTHORIZATION
        assert export.headers["content-type"] == "application/x-protobuf"
    resource, _, _ = next(receiver.metric_points("queuecore.messages.published"))
    assert resource["queuecore.role"] == "api"
    assert resource["service.name"] == "queuecore-test"
    assert resource["service.instance.id"]


def test_metric_attributes_are_bounded_route_templates_never_names(
    live: tuple[Server, OtlpReceiver], services: Services, unique: Callable[[str], str]
) -> None:
    server, receiver = live
    client, _, topic = tenant(server, services, unique)
    assert client.post(f"/v1/topics/{topic}/messages", json={"data": 1}).status_code == 201
    group = f"/v1/topics/{topic}/groups/g"
    assert client.put(group, json={"startFrom": "earliest"}).status_code == 200
    member = client.post(f"{group}/members", json={}).json()["memberId"]
    pulled = client.post(f"{group}/members/{member}/pull", json={"maxMessages": 10}).json()
    assert len(pulled["messages"]) == 1
    pull_route = "/v1/topics/{topic}/groups/{group}/members/{member_id}/pull"

    eventually(
        lambda: receiver.total("http.server.request.duration", **{"http.route": pull_route}) >= 1,
        20,
        "the pull's duration under its route template",
    )
    routes = {
        attributes.get("http.route")
        for _, attributes, _ in receiver.metric_points("http.server.request.duration")
    }
    assert PUBLISH_ROUTE in routes
    values = {
        str(value)
        for name in receiver.metric_names()
        for _, attributes, _ in receiver.metric_points(name)
        for value in attributes.values()
    }
    assert not [v for v in values if topic in v or member in v], values


def test_http_spans_carry_the_request_id_of_their_response(
    live: tuple[Server, OtlpReceiver], services: Services, unique: Callable[[str], str]
) -> None:
    server, receiver = live
    client, _, topic = tenant(server, services, unique)
    response = client.post(f"/v1/topics/{topic}/messages", json={"data": "traced"})
    assert response.status_code == 201
    request_id = response.headers["X-Request-Id"]
    chosen = "req_" + secrets.token_hex(10)
    # A tenant's trace context is not ours to join: the request starts its own trace.
    foreign_trace = secrets.token_hex(16)
    traceparent = f"00-{foreign_trace}-{secrets.token_hex(8)}-01"
    echoed = client.get(
        f"/v1/topics/{topic}", headers={"X-Request-Id": chosen, "traceparent": traceparent}
    )
    assert echoed.headers["X-Request-Id"] == chosen

    def span_of(rid: str) -> Any:
        return next((s for a, s in receiver.spans() if a.get("request_id") == rid), None)

    eventually(lambda: span_of(request_id) and span_of(chosen), 20, "both requests' spans")
    span = span_of(request_id)
    attributes = dict(next(a for a, s in receiver.spans() if s is span))
    assert span.name == f"POST {PUBLISH_ROUTE}"
    assert attributes["http.route"] == PUBLISH_ROUTE
    assert attributes["http.response.status_code"] == 201
    assert span_of(chosen).name == "GET /v1/topics/{topic}"
    assert span_of(chosen).trace_id.hex() != foreign_trace
    assert span_of(chosen).parent_span_id == b""
    for export in receiver.of("traces"):
        assert export.path == "/v1/otlp/v1/traces"
        assert export.headers["x-greptime-pipeline-name"] == "greptime_trace_v1"
        assert export.headers["x-greptime-db-name"] == DB_NAME
        assert export.headers["authorization"] == AUTHORIZATION


def test_log_records_carry_the_request_id_and_trace_of_their_request(
    live: tuple[Server, OtlpReceiver], services: Services, unique: Callable[[str], str]
) -> None:
    server, receiver = live
    _, secret, topic = tenant(server, services, unique)
    request_id = "req_" + secrets.token_hex(10)
    disconnect_mid_body(server, f"/v1/topics/{topic}/messages", secret, request_id)

    def record() -> Any:
        return next(
            ((a, r) for a, r in receiver.log_records() if a.get("request_id") == request_id), None
        )

    def span() -> Any:
        return next((s for a, s in receiver.spans() if a.get("request_id") == request_id), None)

    eventually(lambda: record() is not None and span() is not None, 20, "the request's log line")
    attributes, log_record = record()
    assert log_record.body.string_value == "client_disconnected"
    assert log_record.severity_text == "INFO"
    assert attributes["path"] == f"/v1/topics/{topic}/messages"
    assert attributes["organisation_id"]  # bound by the key's authentication
    assert log_record.trace_id == span().trace_id
    assert log_record.span_id == span().span_id
    for export in receiver.of("logs"):
        assert export.path == "/v1/otlp/v1/logs"
        assert export.headers["x-greptime-log-table-name"] == LOG_TABLE
        assert export.headers["x-greptime-db-name"] == DB_NAME
        assert export.headers["authorization"] == AUTHORIZATION
        # The trace pipeline must not process log lines.
        assert "x-greptime-pipeline-name" not in export.headers


def test_no_api_key_secret_in_any_exported_body(
    live: tuple[Server, OtlpReceiver], services: Services, unique: Callable[[str], str]
) -> None:
    server, receiver = live
    client, secret, topic = tenant(server, services, unique)
    assert client.post(f"/v1/topics/{topic}/messages", json={"data": 1}).status_code == 201
    # A key pasted where it does not belong: in a path, a query string, a logged path.
    assert client.get(f"/v1/topics/{secret}", params={"key": secret}).status_code == 404
    disconnect_mid_body(server, f"/v1/topics/{secret}/messages", secret, "req_" + "k" * 20)

    def masked_everywhere() -> bool:
        logged = [a for a, _ in receiver.log_records() if a.get("request_id") == "req_" + "k" * 20]
        spans = [a for a, _ in receiver.spans() if "[REDACTED]" in str(a.get("url.path"))]
        return bool(logged) and len(spans) >= 2

    eventually(masked_everywhere, 20, "the requests' logs and spans, masked")
    assert receiver.exports
    for export in receiver.exports:
        assert secret.encode() not in export.body, export.path
        assert secret[-32:].encode() not in export.body, export.path


def test_metrics_flushed_at_shutdown_count_exactly_what_happened(
    services: Services, receiver: OtlpReceiver, unique: Callable[[str], str], tmp_path: Path
) -> None:
    # A ten-minute interval: only the shutdown flush can deliver these numbers.
    with serve(services, tmp_path / "serve.log", exporting_env(receiver, 600_000)) as server:
        client, _, once = tenant(server, services, unique)
        at_least = unique("alo")
        assert (
            client.post(
                "/v1/topics",
                json={"name": at_least, "delivery": "at-least-once", "latencyClass": "standard"},
            ).status_code
            == 201
        )
        for n in range(4):
            assert client.post(f"/v1/topics/{once}/messages", json={"data": n}).status_code == 201
        batch = {"messages": [{"data": n} for n in range(6)]}
        assert client.post(f"/v1/topics/{at_least}/messages/batch", json=batch).status_code == 201

        group = f"/v1/topics/{once}/groups/g"
        config = {"startFrom": "earliest", "deadLetter": {"maxRetries": 0}}
        assert client.put(group, json=config).status_code == 200
        member = client.post(f"{group}/members", json={}).json()["memberId"]
        delivered: list[dict[str, Any]] = []
        while len(delivered) < 4:
            pull = client.post(f"{group}/members/{member}/pull", json={"maxMessages": 10})
            delivered += pull.json()["messages"]
        ack_ids = [m["ackId"] for m in delivered]
        assert client.post(f"{group}/ack", json={"ackIds": ack_ids[:3]}).status_code == 200
        nacked = client.post(f"{group}/nack", json={"ackId": ack_ids[3], "error": "boom"})
        assert nacked.json()["deadLettered"] is True
        assert receiver.of("metrics") == []  # nothing before the flush
        # A single server process re-raises the SIGTERM it handled once shut down gracefully.
        assert server.stop() in (0, -signal.SIGTERM)
        assert "Application shutdown complete" in server.log.read_text()

    published = "queuecore.messages.published"
    assert receiver.total(published, **{"queuecore.delivery": "exactly_once"}) == 4
    assert (
        receiver.total(
            published,
            **{"queuecore.delivery": "at_least_once", "queuecore.latency_class": "standard"},
        )
        == 6
    )
    assert receiver.total("queuecore.messages.published.size") >= 10
    assert receiver.total("queuecore.messages.delivered") == 4
    assert receiver.total("queuecore.messages.acked") == 3
    assert receiver.total("queuecore.messages.nacked") == 1
    assert receiver.total("queuecore.messages.dead_lettered", reason="nack") == 1

    committed = receiver.latest("queuecore.writer.flush.messages", outcome="committed")
    assert sum(point.sum for point in committed.values()) == 10
    flushes = receiver.total("queuecore.writer.flush.duration", outcome="committed")
    assert 2 <= flushes <= 5  # one per publish request at most, at least one per topic
    statements = "queuecore.db.statement.duration"
    assert receiver.total(statements, statement="commit_flush") == flushes
    assert receiver.total("queuecore.object_store.duration", operation="put") == flushes
    assert receiver.total(statements, statement="pull") >= 1
    assert receiver.total(statements, statement="ack_ranges") == 1
    assert receiver.total(statements, statement="commit_progress") == 1  # the dead letter's
    route = {"http.route": PUBLISH_ROUTE, "http.response.status_code": 201}
    assert receiver.total("http.server.request.duration", **route) == 4
