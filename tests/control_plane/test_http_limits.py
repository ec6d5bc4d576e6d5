"""The server's own limits, against a real ``queuecore serve`` over raw sockets: a 16 MB header
and 100,000 headers are refused (431, connection closed), a connection that never finishes its
headers (slowloris) or its body is closed in bounded time (408), connections over the caps per
client address (429) and per server (503) are refused at once, a request that is not HTTP gets
400, every one of these answers is the error envelope, and large bodies are unaffected."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from control_plane.edge.http_limits import HEAD_TIMEOUT_S
from infra.embedded import free_port_block
from tests.support.processes import http_status, queuecore, stop, wait_for
from tests.support.services import Services

REFUSED_WITHIN_S = HEAD_TIMEOUT_S + 10  # the timeout plus a loaded machine's slack


BODY_TIMEOUT_S = 2
PER_ADDRESS, PER_SERVER = 4, 8


def connect(api: str, source: str | None = None) -> socket.socket:
    parts = urlsplit(api)
    return socket.create_connection(
        (parts.hostname, parts.port),
        timeout=REFUSED_WITHIN_S,
        source_address=(source, 0) if source else None,
    )


def send_and_read(api: str, request: bytes) -> bytes:
    """Send all it can of ``request``; return what the server answered (b"" if it hung up)."""
    with connect(api) as sock:
        # If the server stops reading, what it said before closing is still readable.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(request)
        return read_until_closed(sock)


def read_until_closed(sock: socket.socket) -> bytes:
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


def status_of(answer: bytes) -> int | None:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else None


def envelope_of(answer: bytes, status: int) -> dict[str, Any]:
    """The error envelope of a whole answer, checked against its status line."""
    assert status_of(answer) == status, answer[:300]
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower(), head
    error: dict[str, Any] = json.loads(body)["error"]
    assert error["status"] == status and error["requestId"].startswith("req_"), error
    assert b"x-request-id: " + error["requestId"].encode().lower() in head.lower()
    return error


@pytest.fixture(scope="module")
def capped(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server with small caps and a short body timeout, behind which 127.0.0.1 is a trusted
    proxy (exempt from the per-address cap) and 127.0.0.2 an ordinary client."""
    port, log = free_port_block(), tmp_path_factory.mktemp("capped") / "serve.log"
    env = services.env() | {
        "QUEUECORE_HTTP_PORT": str(port),
        "QUEUECORE_HTTP_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
        "QUEUECORE_HTTP_MAX_CONNECTIONS_PER_ADDRESS": str(PER_ADDRESS),
        "QUEUECORE_HTTP_MAX_CONNECTIONS": str(PER_SERVER),
        "FORWARDED_ALLOW_IPS": "127.0.0.1",
    }
    proc = queuecore(["serve", "--workers", "1"], env, log)
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: http_status(f"{base}/readyz") == 200, 60, "api ready", proc, log)
    yield base
    stop(proc)


def test_a_16_mb_header_is_refused(api: str) -> None:
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (16 << 20) + b"\r\n\r\n"
    answer = send_and_read(api, request)
    if answer:  # the server may hang up before the client has read its answer
        assert envelope_of(answer, 431)["code"] == "REQUEST_HEADERS_TOO_LARGE"


def test_a_hundred_thousand_headers_are_refused(api: str) -> None:
    fields = b"".join(b"X-H%d: v\r\n" % i for i in range(100_000))
    answer = send_and_read(api, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + fields + b"\r\n")
    if answer:
        assert envelope_of(answer, 431)["code"] == "REQUEST_HEADERS_TOO_LARGE"


def test_a_request_that_is_not_http_gets_the_error_envelope(api: str) -> None:
    answer = send_and_read(api, b"HELLO THERE\r\n\r\n")
    assert envelope_of(answer, 400)["code"] == "BAD_REQUEST"


def test_a_head_that_never_ends_is_closed_in_bounded_time(api: str) -> None:
    with connect(api) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        closed, answer = False, b""
        while time.monotonic() - started < REFUSED_WITHIN_S:
            try:
                sock.sendall(b"X-Slow: 1\r\n")  # a trickle, as slowloris sends
                sock.settimeout(1)
                answer = sock.recv(65536)
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            closed = True  # it answered (408) and closes, or closed
            answer += read_until_closed(sock) if answer else b""
            break
        elapsed = time.monotonic() - started
    assert closed, f"still open after {elapsed:.0f} s"
    assert elapsed >= HEAD_TIMEOUT_S - 1
    if answer:
        assert envelope_of(answer, 408)["code"] == "REQUEST_TIMEOUT"


def test_ordinary_heads_and_large_bodies_still_work(api: str) -> None:
    body = b'{"name": "' + b"x" * 300_000 + b'"}'
    head = (
        b"POST /v1/topics HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    answer = send_and_read(api, head + body)
    assert status_of(answer) == 401, answer[:300]
    assert b'"INVALID_API_KEY"' in answer or b'"UNAUTHORIZED"' in answer
    ok = send_and_read(api, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert status_of(ok) == 200


def test_a_body_promised_and_never_sent_is_refused_in_bounded_time(capped: str) -> None:
    with connect(capped) as sock:
        sock.sendall(
            b"POST /auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"email"'
        )
        started = time.monotonic()
        answer = read_until_closed(sock)
        elapsed = time.monotonic() - started
    assert envelope_of(answer, 408)["code"] == "REQUEST_TIMEOUT"
    assert BODY_TIMEOUT_S - 0.5 <= elapsed <= BODY_TIMEOUT_S + 10, elapsed


def test_connections_over_the_caps_are_refused_at_once(capped: str) -> None:
    with contextlib.ExitStack() as held:
        for _ in range(PER_ADDRESS):  # idle: nothing sent yet
            held.enter_context(connect(capped, source="127.0.0.2"))
        time.sleep(0.3)  # the server has accepted them all
        with connect(capped, source="127.0.0.2") as sock:
            error = envelope_of(read_until_closed(sock), 429)
        assert error["code"] == "RATE_LIMIT_EXCEEDED"
        # A trusted proxy's clients are many: its address has no cap of its own, the server has.
        for _ in range(PER_SERVER - PER_ADDRESS):
            held.enter_context(connect(capped, source="127.0.0.1"))
        time.sleep(0.3)
        with connect(capped, source="127.0.0.1") as sock:
            error = envelope_of(read_until_closed(sock), 503)
        assert error["code"] == "SERVICE_UNAVAILABLE"
    time.sleep(0.3)  # the held connections closed: room again
    ok = send_and_read(capped, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert status_of(ok) == 200
