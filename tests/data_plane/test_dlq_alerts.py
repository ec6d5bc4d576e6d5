"""DLQ alert webhooks: the endpoint API, one signed alert per threshold crossing, re-arming,
retries with the same delivery id, and the guard against private addresses."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import http.server
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient
from psycopg.rows import dict_row

from core.errors import ValidationFailed
from core.settings import WebhookSettings
from data_plane import tasks
from data_plane.deadletters import alerts, webhooks
from infra.celery_app import celery_app
from tenants.models import NewOrganisation
from tests.support.logs import captured
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation

ENDPOINT = "/v1/alerts/endpoint"
SECRET = re.compile(r"^whsec_[0-9A-Za-z]{32}$")


@dataclass
class Received:
    """One request the receiver got."""

    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """A real HTTP server on 127.0.0.1 that records what it is sent and answers as scripted."""

    url: str = ""
    statuses: list[int] = field(default_factory=list)  # answers in turn, then 200
    requests: list[Received] = field(default_factory=list)

    def wait_for(self, count: int, timeout_s: float = 20) -> list[Received]:
        deadline = time.monotonic() + timeout_s
        while len(self.requests) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(self.requests) >= count, f"{len(self.requests)} of {count} requests arrived"
        return list(self.requests)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    received = Receiver()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            headers = {name.lower(): value for name, value in self.headers.items()}
            received.requests.append(Received(headers, body))
            self.send_response(received.statuses.pop(0) if received.statuses else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    received.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/queuecore"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield received
    server.shutdown()
    server.server_close()


@pytest.fixture
def org(services: Services) -> NewOrganisation:
    return new_organisation(services.database_url, tier="pro")


def admin(org: NewOrganisation, environment: str = "production") -> dict[str, str]:
    return bearer(org.keys[environment].secret)


def put_endpoint(client: TestClient, org: NewOrganisation, url: str, **body: Any) -> Any:
    response = client.put(ENDPOINT, json={"url": url, **body}, headers=admin(org))
    assert response.status_code == 200, response.text
    return response.json()


class AlertingGroup:
    """A topic with one group whose deadLetter.alertThreshold is set, and its dead letters."""

    def __init__(
        self, client: TestClient, org: NewOrganisation, services: Services, name: str, **dead: Any
    ) -> None:
        self.client, self.headers, self.url = client, admin(org), services.database_url
        self.topic, self.name = name, "workers"
        created = client.post("/v1/topics", json={"name": name}, headers=self.headers)
        assert created.status_code == 201, created.text
        self.base = f"/v1/topics/{name}/groups/{self.name}"
        config = {"startFrom": "earliest", "deadLetter": dead}
        response = client.put(self.base, json=config, headers=self.headers)
        assert response.status_code == 200, response.text
        self.id = self._sql(
            "SELECT g.id FROM consumer_groups g JOIN topics t ON t.id = g.topic_id"
            " WHERE t.name = %s AND g.environment_id = %s",
            (name, org.project.environment("production").id),
        )[0]["id"]
        self.next_offset = 0

    def _sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        with psycopg.connect(self.url, row_factory=dict_row, autocommit=True) as conn:
            cursor = conn.execute(statement, params)
            return cursor.fetchall() if cursor.description else []

    def dead_letter(self, count: int) -> None:
        """Add ``count`` dead letters, as messages that exhausted their retries."""
        first, self.next_offset = self.next_offset, self.next_offset + count
        self._sql(
            'INSERT INTO dead_letters (id, group_id, partition, "offset", value, published_at_ms,'
            " error, attempts, first_delivered_at)"
            " SELECT 'dl_' || md5(random()::text), %s, 0, o, '\\x7b7d'::bytea, 0, 'boom', 1, now()"
            " FROM generate_series(%s::bigint, %s::bigint) o",
            (self.id, first, self.next_offset - 1),
        )

    def replay_all(self) -> None:
        self._sql("UPDATE dead_letters SET replayed_at = now() WHERE group_id = %s", (self.id,))

    def raised(self) -> bool:
        rows = self._sql(
            "SELECT dlq_alert_raised_at FROM consumer_groups WHERE id = %s", (self.id,)
        )
        return rows[0]["dlq_alert_raised_at"] is not None

    def deliveries(self) -> list[dict[str, Any]]:
        return self._sql(
            "SELECT id, status, attempts, last_status_code, last_error, payload"
            " FROM webhook_deliveries WHERE payload->>'topic' = %s ORDER BY created_at",
            (self.topic,),
        )

    def check(self) -> dict[str, int]:
        """One run of the beat task, in this process; its deliveries go to the real worker (through
        the configured Celery app, made current here whichever test ran first)."""
        celery_app()
        return tasks.check_dlq_alerts(group_id=self.id)


def check_in_process(group_id: str) -> alerts.CheckReport:
    """The check's service alone: nothing is queued for the worker."""

    async def run() -> alerts.CheckReport:
        async with await psycopg.AsyncConnection.connect(
            _database_url(), autocommit=True, row_factory=dict_row
        ) as conn:
            return await alerts.check_groups(conn, group_id)

    return asyncio.run(run())


def deliver_in_process(delivery_id: str, cfg: WebhookSettings) -> webhooks.Outcome:
    """One delivery attempt in this process, with the given settings."""

    async def run() -> webhooks.Outcome:
        async with await psycopg.AsyncConnection.connect(
            _database_url(), autocommit=True, row_factory=dict_row
        ) as conn:
            return await webhooks.deliver(conn, delivery_id, cfg)

    return asyncio.run(run())


def _database_url() -> str:
    from core import settings

    return settings.database().url


def verify(request: Received, secret: str) -> None:
    """Check the signature as a receiver would: HMAC-SHA256 over ``{timestamp}.{body}``."""
    timestamp = request.headers["queuecore-timestamp"]
    assert abs(int(timestamp) - time.time()) < 60
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + request.body, hashlib.sha256)
    assert request.headers["queuecore-signature"] == f"v1={expected.hexdigest()}"


# --- the endpoint API -------------------------------------------------------------------------


def test_secret_is_shown_on_creation_and_rotation_only(
    client: TestClient, org: NewOrganisation
) -> None:
    created = put_endpoint(client, org, "https://hooks.example.com/queuecore")
    assert SECRET.match(created["secret"])
    assert created["secretHint"] == f"whsec_…{created['secret'][-4:]}"
    shown = client.get(ENDPOINT, headers=admin(org))
    assert shown.status_code == 200
    assert shown.json()["url"] == "https://hooks.example.com/queuecore"
    assert "secret" not in shown.json()
    assert created["secret"] not in shown.text
    moved = put_endpoint(client, org, "https://hooks.example.com/v2")
    assert "secret" not in moved
    assert (moved["url"], moved["secretHint"]) == (
        "https://hooks.example.com/v2",
        created["secretHint"],
    )
    rotated = put_endpoint(client, org, "https://hooks.example.com/v2", rotateSecret=True)
    assert SECRET.match(rotated["secret"])
    assert rotated["secret"] != created["secret"]
    assert client.get(ENDPOINT, headers=admin(org)).json()["secretHint"] == rotated["secretHint"]


def test_missing_endpoint_is_404_and_delete_removes_it(
    client: TestClient, org: NewOrganisation
) -> None:
    missing = client.get(ENDPOINT, headers=admin(org))
    assert missing.status_code == 404
    error = missing.json()["error"]
    assert (error["code"], error["status"]) == ("ALERT_ENDPOINT_NOT_FOUND", 404)
    assert error["requestId"].startswith("req_")
    put_endpoint(client, org, "https://hooks.example.com/x")
    assert client.delete(ENDPOINT, headers=admin(org)).status_code == 204
    assert client.get(ENDPOINT, headers=admin(org)).status_code == 404
    assert client.delete(ENDPOINT, headers=admin(org)).status_code == 404


def test_another_tenant_or_environment_does_not_see_the_endpoint(
    client: TestClient, org: NewOrganisation, services: Services
) -> None:
    put_endpoint(client, org, "https://hooks.example.com/mine")
    stranger = new_organisation(services.database_url)
    assert client.get(ENDPOINT, headers=admin(stranger)).status_code == 404
    assert client.get(ENDPOINT, headers=admin(org, "staging")).status_code == 404
    put_endpoint(client, stranger, "https://hooks.example.com/theirs")
    assert (
        client.get(ENDPOINT, headers=admin(org)).json()["url"] == "https://hooks.example.com/mine"
    )


def test_a_key_without_admin_scope_is_forbidden(client: TestClient, org: NewOrganisation) -> None:
    issued = client.post(
        "/v1/keys", json={"name": "worker", "scopes": ["publish", "consume"]}, headers=admin(org)
    )
    assert issued.status_code == 201, issued.text
    worker = bearer(issued.json()["key"])
    for response in (
        client.get(ENDPOINT, headers=worker),
        client.put(ENDPOINT, json={"url": "https://hooks.example.com/x"}, headers=worker),
        client.delete(ENDPOINT, headers=worker),
    ):
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "FORBIDDEN"


@pytest.mark.parametrize(
    "url",
    [
        "ftp://hooks.example.com/x",
        "hooks.example.com/x",
        "https://",
        "http:///only-a-path",
        "https://hooks.example.com/" + "a" * 2048,
        "https://hooks.example.com:99999/x",
        "https://hooks.example.com/with space",
    ],
)
def test_invalid_urls_are_rejected_with_the_error_body(
    client: TestClient, org: NewOrganisation, url: str
) -> None:
    response = client.put(ENDPOINT, json={"url": url}, headers=admin(org))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert (error["code"], error["status"]) == ("VALIDATION_ERROR", 422)
    assert error["message"].startswith("url: ")
    assert error["details"] == [{"field": "url", "message": error["message"]}]
    assert error["requestId"].startswith("req_")
    assert client.get(ENDPOINT, headers=admin(org)).status_code == 404


def test_a_body_without_url_is_rejected(client: TestClient, org: NewOrganisation) -> None:
    response = client.put(ENDPOINT, json={"rotateSecret": True}, headers=admin(org))
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["field"] == "url"


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8080/x", "http://localhost/x", "http://10.1.2.3/x", "http://[::1]/x"]
)
def test_private_hosts_are_refused_at_put_when_the_setting_is_off(url: str) -> None:
    with pytest.raises(ValidationFailed) as refused:
        alerts.check_url(url, allow_private=False)
    assert refused.value.field == "url"
    assert alerts.check_url(url, allow_private=True) == url
    assert alerts.check_url("https://hooks.example.com/x", allow_private=False)


def test_the_secret_is_not_logged(client: TestClient, org: NewOrganisation) -> None:
    with captured("queuecore") as logs:
        created = put_endpoint(client, org, "https://hooks.example.com/x")
        rotated = put_endpoint(client, org, "https://hooks.example.com/x", rotateSecret=True)
    assert any("alert_endpoint_set" in message for message in logs.messages)
    assert not [m for m in logs.messages if created["secret"] in m or rotated["secret"] in m]


# --- raising, re-arming and delivering --------------------------------------------------------


def test_reaching_the_threshold_sends_one_signed_alert(
    celery_worker: Path,
    client: TestClient,
    org: NewOrganisation,
    services: Services,
    receiver: Receiver,
    unique: Callable[[str], str],
) -> None:
    secret = put_endpoint(client, org, receiver.url)["secret"]
    group = AlertingGroup(client, org, services, unique("orders"), maxRetries=0, alertThreshold=2)
    _dead_letter_by_nack(client, group, count=1)
    assert group.check()["alertsRaised"] == 0
    _dead_letter_by_nack(client, group, count=1)

    assert group.check()["alertsRaised"] == 1
    assert group.check()["alertsRaised"] == 0
    [request] = receiver.wait_for(1)
    time.sleep(1.0)  # a second alert would have had time to arrive
    assert len(receiver.requests) == 1

    verify(request, secret)
    body = request.json()
    assert body["id"] == request.headers["queuecore-delivery"]
    assert body["id"].startswith("whd_")
    assert request.headers["queuecore-event"] == body["event"] == "dlq.threshold_reached"
    assert (body["topic"], body["group"], body["depth"], body["threshold"]) == (
        group.topic,
        "workers",
        2,
        2,
    )
    assert body["environmentId"] == org.project.environment("production").id
    assert abs(datetime.fromisoformat(body["timestamp"]).timestamp() - time.time()) < 60
    _wait_until(lambda: group.deliveries()[0]["status"] == "delivered")
    assert [(d["status"], d["attempts"]) for d in group.deliveries()] == [("delivered", 1)]


def test_alert_rearms_below_the_threshold_and_the_next_crossing_alerts_again(
    celery_worker: Path,
    client: TestClient,
    org: NewOrganisation,
    services: Services,
    receiver: Receiver,
    unique: Callable[[str], str],
) -> None:
    secret = put_endpoint(client, org, receiver.url)["secret"]
    group = AlertingGroup(client, org, services, unique("orders"), alertThreshold=3)
    group.dead_letter(4)
    group.check()
    first = receiver.wait_for(1)[0]
    assert first.json()["depth"] == 4

    group.replay_all()
    assert group.check()["alertsRearmed"] == 1
    assert not group.raised()
    group.dead_letter(2)
    assert group.check()["alertsRaised"] == 0
    assert len(receiver.requests) == 1  # depth 2: below the threshold

    group.dead_letter(1)
    assert group.check()["alertsRaised"] == 1
    second = receiver.wait_for(2)[1]
    verify(second, secret)
    assert second.json()["depth"] == 3
    assert second.headers["queuecore-delivery"] != first.headers["queuecore-delivery"]


def test_a_failed_attempt_is_retried_with_the_same_delivery_id(
    celery_worker: Path,
    client: TestClient,
    org: NewOrganisation,
    services: Services,
    receiver: Receiver,
    unique: Callable[[str], str],
) -> None:
    secret = put_endpoint(client, org, receiver.url)["secret"]
    receiver.statuses = [500]
    group = AlertingGroup(client, org, services, unique("orders"), alertThreshold=1)
    group.dead_letter(1)
    group.check()

    failed, retried = receiver.wait_for(2)
    assert failed.headers["queuecore-delivery"] == retried.headers["queuecore-delivery"]
    assert failed.body == retried.body
    verify(failed, secret)
    verify(retried, secret)
    _wait_until(lambda: group.deliveries()[0]["status"] == "delivered")
    [delivery] = group.deliveries()
    assert (delivery["attempts"], delivery["last_status_code"]) == (2, 200)
    assert secret not in celery_worker.read_text(errors="replace")


def test_checks_running_at_once_raise_one_alert(
    client: TestClient,
    org: NewOrganisation,
    services: Services,
    receiver: Receiver,
    unique: Callable[[str], str],
) -> None:
    put_endpoint(client, org, receiver.url)
    group = AlertingGroup(client, org, services, unique("orders"), alertThreshold=5)
    group.dead_letter(5)
    with ThreadPoolExecutor(max_workers=4) as pool:
        reports = list(pool.map(check_in_process, [group.id] * 8))
    assert sum(report.alerts_raised for report in reports) == 1
    assert len(group.deliveries()) == 1
    assert group.raised()


def test_without_an_endpoint_nothing_is_sent_and_a_later_endpoint_gets_the_next_crossing(
    celery_worker: Path,
    client: TestClient,
    org: NewOrganisation,
    services: Services,
    receiver: Receiver,
    unique: Callable[[str], str],
) -> None:
    group = AlertingGroup(client, org, services, unique("orders"), alertThreshold=2)
    group.dead_letter(2)
    assert group.check()["alertsRaised"] == 1
    assert group.raised()
    assert group.deliveries() == []

    put_endpoint(client, org, receiver.url)
    assert group.check()["alertsRaised"] == 0  # this crossing was before the endpoint
    group.replay_all()
    group.check()
    group.dead_letter(2)
    group.check()
    assert receiver.wait_for(1)[0].json()["depth"] == 2


def test_another_environments_endpoint_is_never_used(
    celery_worker: Path,
    client: TestClient,
    org: NewOrganisation,
    services: Services,
    receiver: Receiver,
    unique: Callable[[str], str],
) -> None:
    staging = client.put(ENDPOINT, json={"url": receiver.url}, headers=admin(org, "staging"))
    assert staging.status_code == 200
    group = AlertingGroup(client, org, services, unique("orders"), alertThreshold=1)
    group.dead_letter(1)
    assert group.check()["alertsRaised"] == 1
    assert group.deliveries() == []
    time.sleep(1.0)
    assert receiver.requests == []


def test_an_endpoint_removed_before_delivery_gets_nothing(
    client: TestClient,
    org: NewOrganisation,
    services: Services,
    receiver: Receiver,
    unique: Callable[[str], str],
) -> None:
    put_endpoint(client, org, receiver.url)
    group = AlertingGroup(client, org, services, unique("orders"), alertThreshold=1)
    group.dead_letter(1)
    [delivery_id] = check_in_process(group.id).to_send
    assert client.delete(ENDPOINT, headers=admin(org)).status_code == 204
    staging = client.put(ENDPOINT, json={"url": receiver.url}, headers=admin(org, "staging"))
    assert staging.status_code == 200

    outcome = deliver_in_process(delivery_id, WebhookSettings(allow_private=True))

    assert (outcome.status, outcome.retry_in_s) == ("failed", None)
    assert receiver.requests == []
    assert group.deliveries()[0]["last_error"] == "no alert endpoint is configured"


def test_attempts_stop_at_the_cap(
    client: TestClient,
    org: NewOrganisation,
    services: Services,
    receiver: Receiver,
    unique: Callable[[str], str],
) -> None:
    put_endpoint(client, org, receiver.url)
    receiver.statuses = [503, 500, 500]
    group = AlertingGroup(client, org, services, unique("orders"), alertThreshold=1)
    group.dead_letter(1)
    [delivery_id] = check_in_process(group.id).to_send
    cfg = WebhookSettings(allow_private=True, max_attempts=2, retry_base_ms=0)

    first = deliver_in_process(delivery_id, cfg)
    assert (first.status, first.attempts, first.retry_in_s) == ("pending", 1, 0.0)
    second = deliver_in_process(delivery_id, cfg)
    assert (second.status, second.attempts, second.retry_in_s) == ("failed", 2, None)
    assert deliver_in_process(delivery_id, cfg).status == "failed"
    assert len(receiver.requests) == 2
    assert {r.headers["queuecore-delivery"] for r in receiver.requests} == {delivery_id}
    [row] = group.deliveries()
    assert (row["status"], row["attempts"], row["last_error"]) == ("failed", 2, "HTTP 500")


def test_a_private_address_is_refused_when_the_setting_is_off(
    client: TestClient,
    org: NewOrganisation,
    services: Services,
    receiver: Receiver,
    unique: Callable[[str], str],
) -> None:
    put_endpoint(client, org, receiver.url)  # accepted: the test services allow private hosts
    group = AlertingGroup(client, org, services, unique("orders"), alertThreshold=1)
    group.dead_letter(1)
    [delivery_id] = check_in_process(group.id).to_send

    outcome = deliver_in_process(delivery_id, WebhookSettings(allow_private=False))

    assert (outcome.status, outcome.retry_in_s) == ("failed", None)
    assert receiver.requests == []
    [row] = group.deliveries()
    assert "127.0.0.1 is a loopback address" in row["last_error"]


@pytest.mark.parametrize(
    "stored",
    ["http://0177.0.0.1/hook", "http://a..b/hook", "http://xn--a.example.com/hook",
     f"http://{'a' * 64}.example.com/hook"],
)  # fmt: skip
def test_a_url_stored_before_the_rules_fails_its_delivery_for_good(
    client: TestClient,
    org: NewOrganisation,
    services: Services,
    receiver: Receiver,
    unique: Callable[[str], str],
    stored: str,
) -> None:
    put_endpoint(client, org, receiver.url)
    group = AlertingGroup(client, org, services, unique("orders"), alertThreshold=1)
    group._sql(  # as an older version saved it, before the delivery's rules applied at PUT
        "UPDATE alert_endpoints SET url = %s WHERE environment_id = %s",
        (stored, org.project.environment("production").id),
    )
    group.dead_letter(1)
    [delivery_id] = check_in_process(group.id).to_send

    outcome = deliver_in_process(delivery_id, WebhookSettings(allow_private=False))

    assert (outcome.status, outcome.attempts, outcome.retry_in_s) == ("failed", 1, None)
    [row] = group.deliveries()
    assert row["status"] == "failed" and row["last_error"].startswith("refused"), row
    assert receiver.requests == []


def test_an_attempt_that_crashes_is_counted_and_stops_at_the_cap(
    client: TestClient,
    org: NewOrganisation,
    services: Services,
    receiver: Receiver,
    unique: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    put_endpoint(client, org, receiver.url)
    group = AlertingGroup(client, org, services, unique("orders"), alertThreshold=1)
    group.dead_letter(1)
    [delivery_id] = check_in_process(group.id).to_send

    async def crashing(*args: Any) -> webhooks.Attempt:
        raise RuntimeError("a bug in the sending code")  # what no real receiver can cause

    monkeypatch.setattr(webhooks, "post", crashing)
    cfg = WebhookSettings(allow_private=True, max_attempts=2, retry_base_ms=0)
    first = deliver_in_process(delivery_id, cfg)
    second = deliver_in_process(delivery_id, cfg)

    assert (first.status, first.attempts) == ("pending", 1)
    assert (second.status, second.attempts) == ("failed", 2)
    [row] = group.deliveries()
    assert row["last_error"] == "RuntimeError: a bug in the sending code"


def _dead_letter_by_nack(client: TestClient, group: AlertingGroup, count: int) -> None:
    """Publish ``count`` messages and nack them: with maxRetries 0 they go to the DLQ."""
    messages = [{"data": {"n": i}} for i in range(count)]
    published = client.post(
        f"/v1/topics/{group.topic}/messages/batch",
        json={"messages": messages},
        headers=group.headers,
    )
    assert published.status_code == 201, published.text
    joined = client.post(f"{group.base}/members", json={}, headers=group.headers)
    member = joined.json()["memberId"]
    pulled = client.post(
        f"{group.base}/members/{member}/pull",
        json={"maxMessages": count, "waitMs": 5000},
        headers=group.headers,
    ).json()["messages"]
    assert len(pulled) == count
    for message in pulled:
        nacked = client.post(
            f"{group.base}/nack",
            json={"ackId": message["ackId"], "error": "boom"},
            headers=group.headers,
        )
        assert nacked.json()["deadLettered"] is True, nacked.text
    client.delete(f"{group.base}/members/{member}", headers=group.headers)


def _wait_until(condition: Callable[[], bool], timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)
