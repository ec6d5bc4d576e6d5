"""Limits on request heads, enforced by the HTTP protocol ``queuecore serve`` runs.

uvicorn's httptools protocol buffers a request head of any size and waits for it forever. This
subclass refuses a head over :data:`MAX_HEAD_BYTES` or :data:`MAX_HEADER_FIELDS` fields with
``431 Request Header Fields Too Large`` and closes a connection whose head is not complete within
:data:`HEAD_TIMEOUT_S` of the connection opening or the previous response ending (slowloris).
It also writes each response in one syscall (:mod:`control_plane.edge.coalesce`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from control_plane.edge.coalesce import CoalescingTransport

MAX_HEAD_BYTES = 64 * 1024  # request line and headers
MAX_HEADER_FIELDS = 200
HEAD_TIMEOUT_S = 10.0

_CLOSE = b"Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: "


class _HeadRefused(Exception):
    """Raised from a parser callback to stop parsing a head already answered."""


def _plain_response(status_line: bytes, message: bytes) -> bytes:
    return b"HTTP/1.1 " + status_line + b"\r\n" + _CLOSE + b"%d\r\n\r\n" % len(message) + message


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with bounded request heads and a head read timeout."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0
        self._in_head = True
        self._refused = False
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start the clock on the first head; responses write through a
        :class:`~control_plane.edge.coalesce.CoalescingTransport` (one syscall per answer)."""
        super().connection_made(transport)
        self.transport = CoalescingTransport(transport, self.loop)  # type: ignore[assignment]
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop the head clock with the connection."""
        self._stop_head_timer()
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
            self._refuse(b"431 Request Header Fields Too Large", b"Request head too large")
        elif not self._refused:
            self.data_received(data[room:])

    def on_message_begin(self) -> None:
        """A head starts (possibly pipelined behind a response still being sent)."""
        super().on_message_begin()
        self._in_head = True

    def on_header(self, name: bytes, value: bytes) -> None:
        """Refuse a head with too many fields."""
        if len(self.headers) >= MAX_HEADER_FIELDS:
            self._refuse(b"431 Request Header Fields Too Large", b"Too many header fields")
            raise _HeadRefused
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        """The head is in: no more head limits until the response ends."""
        self._in_head = False
        self._stop_head_timer()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        """A keep-alive connection waits for its next head: restart the count and the clock."""
        super().on_response_complete()
        if not self.transport.is_closing():
            self._await_head()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a parser error, unless this head was already refused."""
        if not self._refused:
            super().send_400_response(msg)

    def _await_head(self) -> None:
        self._head_bytes, self._in_head = 0, True
        self._stop_head_timer()
        self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timed_out)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._in_head and not self.transport.is_closing():
            self._refuse(b"408 Request Timeout", b"Request head not received in time")

    def _refuse(self, status_line: bytes, message: bytes) -> None:
        self._refused = True
        self._stop_head_timer()
        self.transport.write(_plain_response(status_line, message))
        self.transport.close()
