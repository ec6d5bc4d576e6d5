"""A real ``queuecore serve`` replica on SIGTERM: not ready ("draining") first, then a bounded exit."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from infra.embedded import free_port_block
from tests.support.processes import http_status, queuecore, wait_for
from tests.support.services import Services
from tests.support.tenancy import new_organisation

pytestmark = pytest.mark.e2e

DRAIN_S = 2
TIMEOUT_S = 5


def _readyz(base: str) -> tuple[int, str]:
    response = httpx.get(f"{base}/readyz", timeout=2)
    return response.status_code, response.text


def test_sigterm_fails_readiness_while_draining_then_exits_in_bound(
    services: Services, tmp_path: Path
) -> None:
    port, log = free_port_block(), tmp_path / "serve.log"
    env = {
        **services.env(),
        "QUEUECORE_HTTP_PORT": str(port),
        "QUEUECORE_SHUTDOWN_DRAIN_S": str(DRAIN_S),
        "QUEUECORE_SHUTDOWN_TIMEOUT_S": str(TIMEOUT_S),
    }
    proc = queuecore(["serve", "--workers", "2"], env, log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: http_status(f"{base}/readyz") == 200, 60, "api ready", proc, log)
        client, stream_events = _open_stream(base, services)
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        status, body = _readyz(base)
        while status == 200 and time.monotonic() - started < DRAIN_S / 2:
            time.sleep(0.05)  # the supervisor forwards SIGTERM to its workers
            status, body = _readyz(base)
        assert status == 503  # still serving during the pre-stop delay, but not ready
        assert "draining" in json.loads(body)["error"]["message"]
        assert http_status(f"{base}/healthz") == 200
        # A publish during the drain is answered; the open stream delivers it, then ends.
        assert client.post("/v1/topics/drain.t/messages", json={"data": 1}).status_code == 201
        proc.wait(timeout=DRAIN_S + TIMEOUT_S + 10)
        assert time.monotonic() - started >= DRAIN_S - 0.5  # kept serving for the drain
        kinds = [kind for kind, _ in stream_events]
        assert "message" in kinds
        assert stream_events[-1] == (
            "error",
            {"code": "SERVICE_UNAVAILABLE", "message": "server shutting down, reconnect"},
        )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _open_stream(
    base: str, services: Services
) -> tuple[httpx.Client, list[tuple[str, dict[str, object]]]]:
    """A topic, a group member and its SSE stream read by a thread; returns client and events."""
    org = new_organisation(services.database_url, tier="pro")
    headers = {"Authorization": f"Bearer {org.keys['production'].secret}"}
    client = httpx.Client(base_url=base, headers=headers, timeout=30)
    assert client.post("/v1/topics", json={"name": "drain.t", "partitions": 1}).status_code == 201
    group = client.put("/v1/topics/drain.t/groups/g", json={"startFrom": "earliest"})
    assert group.status_code == 200
    member = client.post("/v1/topics/drain.t/groups/g/members", json={}).json()["memberId"]
    received: list[tuple[str, dict[str, object]]] = []

    def listen() -> None:
        kind = ""
        url = f"/v1/topics/drain.t/groups/g/members/{member}/stream"
        with client.stream("GET", url, timeout=30) as response:
            for line in response.iter_lines():
                if line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:"):
                    received.append((kind, json.loads(line[5:])))

    threading.Thread(target=listen, daemon=True).start()
    time.sleep(0.5)  # the stream is open before the replica drains
    return client, received
