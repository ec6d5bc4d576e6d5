"""A real HTTP server on 127.0.0.1 that push groups deliver to: it records every request and
answers each path as a test scripts it (a status, headers, a delay), and can go down and come
back on the same port."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Pushed:
    """One request the receiver got."""

    path: str
    headers: dict[str, str]
    body: bytes
    arrived: float  # time.monotonic()
    answered: float = 0.0
    status: int = 0

    def json(self) -> Any:
        return json.loads(self.body)

    def signed_by(self, secret: str) -> bool:
        """Whether its signature is the HMAC of ``{timestamp}.{body}`` with ``secret``."""
        timestamp = self.headers["queuecore-timestamp"]
        digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + self.body, hashlib.sha256)
        return hmac.compare_digest(self.headers["queuecore-signature"], f"v1={digest.hexdigest()}")


@dataclass(frozen=True)
class Reply:
    """How to answer one request."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


Script = Callable[[Pushed, int], Reply]  # the request and how many came to its path before it


@dataclass
class Receiver:
    """The server, what it received, and how it answers."""

    port: int = 0
    scripts: dict[str, Script] = field(default_factory=dict)
    received: list[Pushed] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    in_flight: dict[tuple[str, str], int] = field(default_factory=dict)
    most_in_flight: dict[tuple[str, str], int] = field(default_factory=dict)
    _server: http.server.ThreadingHTTPServer | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def at(self, path: str) -> list[Pushed]:
        with self.lock:
            return [r for r in self.received if r.path == path]

    def wait_for(self, path: str, count: int, timeout_s: float = 20) -> list[Pushed]:
        deadline = time.monotonic() + timeout_s
        while len(self.at(path)) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        got = self.at(path)
        assert len(got) >= count, f"{len(got)} of {count} pushes reached {path}"
        return got

    def start(self) -> None:
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as an endpoint behind a balancer does

            def do_POST(self) -> None:
                receiver._answer(self)

            def log_message(self, *_: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        """Go down: the port refuses connections until :meth:`start` again."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _answer(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        body = handler.rfile.read(int(handler.headers.get("Content-Length", "0")))
        headers = {name.lower(): value for name, value in handler.headers.items()}
        pushed = Pushed(handler.path, headers, body, time.monotonic())
        flight = (handler.path, _key_of(body))
        with self.lock:
            before = len([r for r in self.received if r.path == handler.path])
            self.received.append(pushed)
            self.in_flight[flight] = self.in_flight.get(flight, 0) + 1
            self.most_in_flight[flight] = max(
                self.most_in_flight.get(flight, 0), self.in_flight[flight]
            )
        script = self.scripts.get(handler.path)
        reply = script(pushed, before) if script else Reply()
        time.sleep(reply.delay_s)
        with self.lock:
            self.in_flight[flight] -= 1
            pushed.answered, pushed.status = time.monotonic(), reply.status
        try:
            handler.send_response(reply.status)
            for name, value in reply.headers.items():
                handler.send_header(name, value)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
        except OSError:  # the pusher gave up waiting (its timeout)
            pass


def _key_of(body: bytes) -> str:
    try:
        return str(json.loads(body).get("key"))
    except ValueError:
        return ""
