"""A local OTLP receiver, and QueueCore processes exporting to it with GreptimeDB's headers."""

from __future__ import annotations

import base64
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from infra.embedded import free_port_block
from tests.observability.receiver import OtlpReceiver
from tests.support.processes import http_status, queuecore, stop, wait_for
from tests.support.services import Services

DB_NAME = "queuecore_test"
AUTHORIZATION = "Basic " + base64.b64encode(b"greptime_user:greptime_pwd").decode()
LOG_TABLE = "queuecore_logs"


def exporting_env(receiver: OtlpReceiver, interval_ms: int) -> dict[str, str]:
    """The telemetry settings of a process exporting to ``receiver`` as it would to GreptimeDB."""
    return {
        "QUEUECORE_OTLP_ENDPOINT": receiver.base_url,
        "QUEUECORE_OTLP_HEADERS": f"X-Greptime-DB-Name={DB_NAME},Authorization={AUTHORIZATION}",
        "QUEUECORE_OTLP_LOGS_HEADERS": f"X-Greptime-Log-Table-Name={LOG_TABLE}",
        "QUEUECORE_OTLP_EXPORT_INTERVAL_MS": str(interval_ms),
        "QUEUECORE_SERVICE_NAME": "queuecore-test",
        "QUEUECORE_LOG_FORMAT": "json",
    }


@dataclass
class Server:
    """A running ``queuecore serve`` (one server process)."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> int:
        """SIGTERM, as an orchestrator would; its exit code."""
        return stop(self.process)


@contextmanager
def serve(services: Services, log: Path, extra_env: dict[str, str]) -> Iterator[Server]:
    """``queuecore serve --workers 1`` with ``extra_env``, ready; stopped afterwards."""
    port = free_port_block()
    env = {**services.env(), "QUEUECORE_HTTP_PORT": str(port), **extra_env}
    process = queuecore(["serve", "--workers", "1"], env, log)
    server = Server(f"http://127.0.0.1:{port}", process, log)
    try:
        wait_for(lambda: http_status(f"{server.url}/readyz") == 200, 60, "api ready", process, log)
        yield server
    finally:
        server.stop()


def disconnect_mid_body(server: Server, path: str, secret: str, request_id: str) -> None:
    """Send a publish whose body never arrives in full: the API logs ``client_disconnected``."""
    host, port = server.url.removeprefix("http://").split(":")
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {secret}\r\n"
        f"X-Request-Id: {request_id}\r\nContent-Type: application/json\r\n"
        "Content-Length: 1000\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(head.encode() + b'{"data": ')


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    """A fresh OTLP receiver for one test."""
    started = OtlpReceiver().start()
    yield started
    started.stop()
