"""One socket write per response: a transport that gathers what a callback writes.

uvicorn writes a response's status line and headers as soon as the application sends
``http.response.start`` and the body as a second write, so every answer costs two ``send``
syscalls. On loopback a send runs the receiver's TCP path inside the sender's syscall, which made
the response writes about a tenth of the API's CPU per single-message publish (docs/decisions.md
§40). :class:`CoalescingTransport` keeps what is written during one event-loop callback and hands
it to the real transport once, with ``writelines`` (one ``writev``), just after that callback:
the head and the body of an answer leave together, a few microseconds later at most.
"""

from __future__ import annotations

import asyncio
from typing import Any

MAX_KEPT_BYTES = 64 * 1024  # more than this goes out at once: a long body keeps flow control


class CoalescingTransport:
    """Wraps a transport: writes made in one loop callback go out as one, right after it.

    Everything but writing, closing and the write buffer size is the wrapped transport's.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self._kept = 0

    def write(self, data: bytes) -> None:
        """Keep ``data``; the first write of a callback schedules the flush. Past
        :data:`MAX_KEPT_BYTES` kept, everything goes to the transport now, so its buffer and
        flow control (uvicorn waits while the transport's writes are paused) see it."""
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
            self._kept = 0
        self._pending.append(data)
        self._kept += len(data)
        if self._kept > MAX_KEPT_BYTES:
            self.flush()

    def writelines(self, lines: list[bytes]) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        """Hand what was kept to the real transport now (nothing if it is closing)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        if self._transport.is_closing():
            return
        if len(pending) == 1:
            self._transport.write(pending[0])
        else:
            self._transport.writelines(pending)

    def close(self) -> None:
        """Send what was kept, then close (as a transport's close sends its buffer)."""
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        """Drop what was kept and the connection."""
        self._pending = []
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + (self._kept if self._pending else 0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
