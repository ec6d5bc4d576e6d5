"""A fault-injecting HTTP proxy in front of a real API process.

``faulty_proxy`` forwards every request to the real server and relays its answer, except for
the first ``times`` requests matching ``when``:

- by default their answer is lost: the server did the work, and the client sees its connection
  closed without a response, as after a network cut at the worst moment;
- with ``fail_with=503`` (or any status) they are not forwarded at all and answered with that
  status and a QueueCore error body, as when a backing service is down.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "content-encoding",
    "host",
}


@dataclass
class FaultyProxy:
    """What the proxy saw: every ``(method, path)`` it received, and those it spoiled."""

    url: str = ""
    received: list[tuple[str, str]] = field(default_factory=list)
    spoiled: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def spoil(self, where: tuple[str, str], when: Callable[[str, str], bool], times: int) -> bool:
        """Record a request; whether it is one of the first ``times`` matching ``when``."""
        with self.lock:
            self.received.append(where)
            if when(*where) and len(self.spoiled) < times:
                self.spoiled.append(where)
                return True
            return False


@contextmanager
def faulty_proxy(
    upstream: str,
    when: Callable[[str, str], bool],
    times: int = 1,
    fail_with: int | None = None,
) -> Iterator[FaultyProxy]:
    """Run the proxy to ``upstream`` on a free local port for the block."""
    seen = FaultyProxy()
    client = httpx.Client(base_url=upstream, timeout=60)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _relay(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            spoil = seen.spoil((self.command, self.path), when, times)
            if spoil and fail_with is not None:
                request_id = self.headers.get("x-request-id") or "req_injected0"
                self._answer(fail_with, {}, _error_body(fail_with, request_id))
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            if self.command == "GET" and self.path.partition("?")[0].endswith("/stream"):
                self._relay_stream(headers)
                return
            answer = client.request(self.command, self.path, content=body, headers=headers)
            if spoil:
                self.close_connection = True  # the work is done; its answer never arrives
                return
            self._answer(answer.status_code, answer.headers, answer.content)

        def _answer(
            self, status: int, headers: httpx.Headers | dict[str, str], body: bytes
        ) -> None:
            self.send_response(status)
            for name, value in headers.items():
                if name.lower() not in _HOP_BY_HOP:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _relay_stream(self, headers: dict[str, str]) -> None:
            """An event stream, relayed chunk by chunk as it comes (until either side ends).

            Asked for uncompressed: the relayed bytes are the body as the server sent it."""
            plain = {k: v for k, v in headers.items() if k.lower() != "accept-encoding"}
            plain["Accept-Encoding"] = "identity"
            with client.stream(self.command, self.path, headers=plain, timeout=None) as answer:
                self.send_response(answer.status_code)
                for name, value in answer.headers.items():
                    if name.lower() not in _HOP_BY_HOP:
                        self.send_header(name, value)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for chunk in answer.iter_raw():
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    pass  # the client went away: so does the upstream stream
                self.close_connection = True

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _relay

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: object, client_address: object) -> None:
            """Quiet: a client closing its connection early is part of the tests."""

    server = Server(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    seen.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield seen
    finally:
        server.shutdown()
        server.server_close()
        client.close()


def _error_body(status: int, request_id: str) -> bytes:
    """A QueueCore error body for an injected failure, with the request's own id."""
    error = {"code": "SERVICE_UNAVAILABLE", "message": "injected", "status": status}
    return json.dumps({"error": {**error, "requestId": request_id}}).encode()
