"""A real ``queuecore serve`` replica on SIGTERM: not ready ("draining") first, then a bounded exit."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import httpx

from infra.embedded import free_port_block
from tests.support.processes import http_status, queuecore, wait_for
from tests.support.services import Services

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
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        status, body = _readyz(base)
        while status == 200 and time.monotonic() - started < DRAIN_S / 2:
            time.sleep(0.05)  # the supervisor forwards SIGTERM to its workers
            status, body = _readyz(base)
        assert status == 503  # still serving during the pre-stop delay, but not ready
        assert "draining" in json.loads(body)["error"]["message"]
        assert http_status(f"{base}/healthz") == 200
        proc.wait(timeout=DRAIN_S + TIMEOUT_S + 10)
        assert time.monotonic() - started >= DRAIN_S - 0.5  # kept serving for the drain
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
