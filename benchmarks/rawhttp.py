"""A minimal keep-alive HTTP/1.1 client for the load generator.

On this 2-core machine ``httpx`` spends about 1.4 ms of CPU per request, so one load-generator
process could not even offer 1,000 requests per second and would measure itself. Requests here
are built once, up front, and sent as bytes on a persistent connection; a response is read by
its ``Content-Length`` (QueueCore's JSON answers always carry one).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator


def build_request(host: str, port: int, path: str, headers: dict[str, str], body: bytes) -> bytes:
    """The bytes of one ``POST`` with a JSON body, ready to send again and again."""
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class Connection:
    """One persistent connection; reconnects after an error, a cancel or ``Connection: close``."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def send(self, request: bytes) -> tuple[int, bytes]:
        """Send a pre-built request; the status and body of its response.

        A reused connection that the server closed while idle (its keep-alive timeout) gives EOF
        before any byte of the response: the request was never read, so it is sent once more on
        a new connection.
        """
        reused = self._writer is not None
        try:
            return await self._exchange(request)
        except (asyncio.IncompleteReadError, ConnectionResetError) as exc:
            partial = getattr(exc, "partial", b"")
            if not reused or partial:
                raise
        return await self._exchange(request)

    async def _exchange(self, request: bytes) -> tuple[int, bytes]:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        assert self._reader is not None
        try:
            self._writer.write(request)
            head = await self._reader.readuntil(b"\r\n\r\n")
            body = await self._reader.readexactly(_content_length(head))
        except BaseException:
            self.close()  # a half-read response would poison the next request
            raise
        if b"\r\nconnection: close" in head.lower():
            self.close()
        return int(head[9:12]), body

    def close(self) -> None:
        """Drop the connection (the next send opens a new one)."""
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
        self._reader = self._writer = None


class Pool:
    """Keep-alive connections shared by concurrent senders: each send borrows an idle one.

    A send that finds every connection busy waits for one (an open loop counts that wait).
    """

    def __init__(self, host: str, port: int, size: int) -> None:
        self._idle: asyncio.Queue[Connection] = asyncio.Queue()
        for _ in range(size):
            self._idle.put_nowait(Connection(host, port))

    async def send(self, request: bytes) -> tuple[int, bytes]:
        """Send on an idle connection; the status and body of the response."""
        connection = await self._idle.get()
        try:
            return await connection.send(request)
        finally:
            self._idle.put_nowait(connection)

    def close(self) -> None:
        """Close the connections that are idle (all of them once sends are done)."""
        while not self._idle.empty():
            self._idle.get_nowait().close()


def _content_length(head: bytes) -> int:
    for line in head.lower().split(b"\r\n"):
        if line.startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    raise ValueError(f"response without Content-Length: {head[:200]!r}")


def build_get(host: str, port: int, path: str, headers: dict[str, str]) -> bytes:
    """The bytes of one ``GET`` without a body."""
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


class EventStream:
    """One Server-Sent Events response read off a raw connection (chunked or not).

    :meth:`open` sends the request and checks for 200; :meth:`events` then yields
    ``(event, data)`` per event block; comments (keep-alives) are skipped.
    """

    def __init__(self, host: str, port: int, request: bytes) -> None:
        self.host = host
        self.port = port
        self.request = request
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._chunked = False

    async def open(self) -> None:
        """Connect, send the request and read the response head (anything but 200 raises)."""
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        self._writer.write(self.request)
        head = await self._reader.readuntil(b"\r\n\r\n")
        if int(head[9:12]) != 200:
            self.close()
            raise RuntimeError(f"stream answered {head[:300]!r}")
        self._chunked = b"transfer-encoding: chunked" in head.lower()

    async def events(self) -> AsyncIterator[tuple[str, bytes]]:
        """Events until the server ends the stream."""
        assert self._reader is not None, "open() first"
        buffer = b""
        while True:
            data = await _next_chunk(self._reader, self._chunked)
            if not data:
                return
            buffer += data
            *blocks, buffer = _SSE_BLOCK.split(buffer)
            for block in blocks:
                event = _parse_event(block)
                if event is not None:
                    yield event

    def close(self) -> None:
        """Drop the connection, which ends the server's stream."""
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
        self._reader = self._writer = None


_SSE_BLOCK = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_SSE_LINE = re.compile(rb"\r\n|\n|\r")


async def _next_chunk(reader: asyncio.StreamReader, chunked: bool) -> bytes:
    """The next piece of the body; empty at its end."""
    if not chunked:
        return await reader.read(65536)
    size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
    if size == 0:
        return b""
    data = await reader.readexactly(size + 2)
    return data[:-2]


def _parse_event(block: bytes) -> tuple[str, bytes] | None:
    event, data = "message", []
    for line in _SSE_LINE.split(block):
        if line.startswith(b"event:"):
            event = line[6:].strip().decode()
        elif line.startswith(b"data:"):
            data.append(line[5:].removeprefix(b" "))
    return (event, b"\n".join(data)) if data else None
