"""Limits on connections and requests, enforced by the HTTP protocol ``queuecore serve`` runs.

uvicorn's httptools protocol accepts any number of connections, buffers a request head of any
size and waits for a head or a body for ever. This subclass:

- refuses a connection over :attr:`HttpSettings.max_connections` open ones in this process (503)
  or over :attr:`HttpSettings.max_connections_per_address` from one client address (429), unless
  that address is a trusted proxy (``FORWARDED_ALLOW_IPS``: its clients are many);
- refuses a head over :data:`MAX_HEAD_BYTES` or :data:`MAX_HEADER_FIELDS` fields (431);
- closes a connection whose head is not complete within :data:`HEAD_TIMEOUT_S` of the connection
  opening or the previous response ending, or whose body is not complete within
  :attr:`HttpSettings.body_timeout_s` of its head (408; slowloris, and a body promised and
  never sent);
- answers a request it cannot parse with 400.

Each of these answers is the API's error envelope, with a request id, and closes the connection
(docs/faults.md, "Answers from the HTTP server"). Responses are written in one syscall
(:mod:`control_plane.edge.coalesce`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import resource
from collections import Counter
from dataclasses import dataclass
from typing import Any

import msgspec
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from control_plane.edge.coalesce import CoalescingTransport
from control_plane.edge.request_id import new_request_id
from core import settings

MAX_HEAD_BYTES = 64 * 1024  # request line and headers
MAX_HEADER_FIELDS = 200
HEAD_TIMEOUT_S = 10.0
RESERVED_FILES = 128  # descriptors kept for PostgreSQL, Redis, S3, logs when capping connections

_REASONS = {
    400: b"400 Bad Request",
    408: b"408 Request Timeout",
    429: b"429 Too Many Requests",
    431: b"431 Request Header Fields Too Large",
    503: b"503 Service Unavailable",
}
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_open_by_address: Counter[str] = Counter()  # this process's connections, by client address


def envelope_response(status: int, code: str, message: str, retry_after_s: int = 0) -> bytes:
    """A whole HTTP/1.1 answer carrying the error envelope, closing the connection."""
    rid = new_request_id()
    body = msgspec.json.encode(
        {"error": {"code": code, "message": message, "status": status, "requestId": rid}}
    )
    head = [
        b"HTTP/1.1 " + _REASONS[status],
        b"Content-Type: application/json",
        b"Content-Length: %d" % len(body),
        b"X-Request-Id: " + rid.encode(),
        b"Connection: close",
    ]
    if retry_after_s:
        head.append(b"Retry-After: %d" % retry_after_s)
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class _HeadRefused(Exception):
    """Raised from a parser callback to stop parsing a head already answered."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with connection caps and bounded heads and bodies."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0
        self._in_head = True
        self._refused = False
        self._address: str | None = None  # counted against its address's cap
        self._expects_body = False
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Refuse a connection over the caps; else start the clock on the first head.
        Responses write through a :class:`~control_plane.edge.coalesce.CoalescingTransport`
        (one syscall per answer)."""
        super().connection_made(transport)
        self.transport = CoalescingTransport(transport, self.loop)  # type: ignore[assignment]
        refusal = self._over_cap()
        if refusal is not None:
            self._refuse(*refusal)
            return
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop the clock and uncount the connection."""
        self._stop_timer()
        if self._address is not None:
            _open_by_address[self._address] -= 1
            if _open_by_address[self._address] <= 0:
                del _open_by_address[self._address]
            self._address = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Count head bytes; refuse the head once it passes :data:`MAX_HEAD_BYTES`."""
        if self._refused:
            return
        if not self._in_head:
            super().data_received(data)
            return
        room = MAX_HEAD_BYTES - self._head_bytes
        self._head_bytes += min(len(data), room)
        if len(data) <= room:
            super().data_received(data)
            return
        super().data_received(data[:room])  # may complete the head: then the rest is body
        if self._in_head and not self._refused:
            self._refuse(431, "REQUEST_HEADERS_TOO_LARGE", "The request head is over 64 KiB")
        elif not self._refused:
            self.data_received(data[room:])

    def on_message_begin(self) -> None:
        """A head starts (possibly pipelined behind a response still being sent)."""
        super().on_message_begin()
        self._in_head = True
        self._expects_body = False

    def on_header(self, name: bytes, value: bytes) -> None:
        """Refuse a head with too many fields; note whether a body follows."""
        if len(self.headers) >= MAX_HEADER_FIELDS:
            self._refuse(431, "REQUEST_HEADERS_TOO_LARGE", "The request has over 200 headers")
            raise _HeadRefused
        super().on_header(name, value)
        lowered = self.headers[-1][0]  # uvicorn's own lower-cased copy: no second pass
        if lowered == b"transfer-encoding" or (lowered == b"content-length" and value != b"0"):
            self._expects_body = True

    def on_headers_complete(self) -> None:
        """The head is in: the body's clock starts, if a body follows."""
        self._in_head = False
        self._stop_timer()
        super().on_headers_complete()
        if self._expects_body:
            self._timer = self.loop.call_later(_limits().body_timeout_s, self._body_timed_out)

    def on_message_complete(self) -> None:
        """The whole body is in."""
        self._stop_timer()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        """A keep-alive connection waits for its next head: restart the count and the clock."""
        super().on_response_complete()
        if not self.transport.is_closing():
            self._await_head()

    def send_400_response(self, msg: str) -> None:
        """A request the parser refused, unless this head was already answered."""
        if not self._refused:
            self._refuse(400, "BAD_REQUEST", "The request is not valid HTTP/1.1")

    def _over_cap(self) -> tuple[int, str, str, int] | None:
        limits = _limits()
        if len(self.connections) > limits.max_connections:
            return 503, "SERVICE_UNAVAILABLE", "This server has too many open connections", 1
        host = self.client[0] if self.client else None
        if host is None or _trusted(host, self.config.forwarded_allow_ips):
            return None
        if _open_by_address[host] >= limits.max_connections_per_address:
            return 429, "RATE_LIMIT_EXCEEDED", "Too many open connections from this address", 1
        _open_by_address[host] += 1
        self._address = host
        return None

    def _await_head(self) -> None:
        self._head_bytes, self._in_head = 0, True
        self._stop_timer()
        self._timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timed_out)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _head_timed_out(self) -> None:
        self._timer = None
        if self._in_head and not self.transport.is_closing():
            self._refuse(408, "REQUEST_TIMEOUT", "The request head was not received in time")

    def _body_timed_out(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and self.cycle.response_started:
            self._refused = True
            self.transport.close()  # the application answered already: only stop waiting
            return
        self._refuse(408, "REQUEST_TIMEOUT", "The request body was not received in time")

    def _refuse(self, status: int, code: str, message: str, retry_after_s: int = 0) -> None:
        self._refused = True
        self._stop_timer()
        self.transport.write(envelope_response(status, code, message, retry_after_s))
        self.transport.close()


@dataclass(frozen=True)
class _Limits:
    max_connections: int
    max_connections_per_address: int
    body_timeout_s: float


@functools.cache
def _limits() -> _Limits:
    """The caps of this process: the settings, and no more connections than it has descriptors."""
    http = settings.http()
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    room = http.max_connections if soft == resource.RLIM_INFINITY else soft - RESERVED_FILES
    connections = min(http.max_connections, max(room, 1))
    return _Limits(connections, http.max_connections_per_address, http.body_timeout_s)


@functools.cache
def _proxies(allowed: str) -> tuple[bool, frozenset[str], tuple[Network, ...]]:
    """``FORWARDED_ALLOW_IPS`` parsed: everyone (``*``), literal hosts, networks."""
    items = [item.strip() for item in allowed.split(",") if item.strip()]
    networks = []
    for item in items:
        with contextlib.suppress(ValueError):
            networks.append(ipaddress.ip_network(item, strict=False))
    return "*" in items, frozenset(items), tuple(networks)


def _trusted(host: str, allowed: list[str] | str) -> bool:
    """Whether ``host`` is a proxy whose ``X-Forwarded-For`` uvicorn believes."""
    everyone, hosts, networks = _proxies(allowed if isinstance(allowed, str) else ",".join(allowed))
    if everyone or host in hosts:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(address in network for network in networks)
