"""The server's own limits on request heads, against a real ``queuecore serve`` over raw sockets:
a 16 MB header and 100,000 headers are refused (431, connection closed), a connection that never
finishes its headers (slowloris) is closed in bounded time, and large bodies are unaffected."""

from __future__ import annotations

import contextlib
import socket
import time
from urllib.parse import urlsplit

from control_plane.edge.http_limits import HEAD_TIMEOUT_S

REFUSED_WITHIN_S = HEAD_TIMEOUT_S + 10  # the timeout plus a loaded machine's slack


def connect(api: str) -> socket.socket:
    parts = urlsplit(api)
    return socket.create_connection((parts.hostname, parts.port), timeout=REFUSED_WITHIN_S)


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


def test_a_16_mb_header_is_refused(api: str) -> None:
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (16 << 20) + b"\r\n\r\n"
    answer = send_and_read(api, request)
    assert status_of(answer) in (431, None), answer[:200]


def test_a_hundred_thousand_headers_are_refused(api: str) -> None:
    fields = b"".join(b"X-H%d: v\r\n" % i for i in range(100_000))
    answer = send_and_read(api, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + fields + b"\r\n")
    assert status_of(answer) in (431, None), answer[:200]


def test_a_head_that_never_ends_is_closed_in_bounded_time(api: str) -> None:
    with connect(api) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        closed = False
        while time.monotonic() - started < REFUSED_WITHIN_S:
            try:
                sock.sendall(b"X-Slow: 1\r\n")  # a trickle, as slowloris sends
                sock.settimeout(1)
                if sock.recv(65536) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            else:
                closed = True  # it answered (408) and will close
                break
        elapsed = time.monotonic() - started
    assert closed, f"still open after {elapsed:.0f} s"
    assert elapsed >= HEAD_TIMEOUT_S - 1


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
