"""A small HTTP/1.1 client for pushes: one POST over a pooled keep-alive connection.

httpx's pool looks at every pooled connection on every request (expiry, readability), which
cost a pusher more CPU per push than everything else together once it held a few hundred
connections (benchmarks/push.py). Pushes need little: POST a body, read the status, a header or
two and the start of the body. So: idle connections per origin in a list (the newest reused
first), a connection dropped after any error or cancellation (a timed-out POST never leaves one
half-read in the pool), and TLS with the host name kept for certificate checks when the address
connected to is a checked IP.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

_NO_BODY = frozenset({204, 304})
IDLE_S = 30.0  # a pooled connection unused this long is closed rather than reused
_HEAD_LIMIT = 65_536
_BODY_LIMIT = 65_536  # more of an answer than this is not read: the connection is dropped


@dataclass(frozen=True, slots=True)
class Answer:
    """What came back: the status, the headers (names in lower case), the start of the body."""

    status: int
    headers: dict[str, str]
    body: bytes


@dataclass(slots=True)
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = 0.0

    def usable(self, now: float) -> bool:
        return (
            now - self.idle_since < IDLE_S
            and not self.reader.at_eof()
            and not self.writer.is_closing()
        )

    def close(self) -> None:
        self.writer.close()


@dataclass(frozen=True, slots=True)
class Origin:
    """Where to connect (``address``: the checked IP, or the host), and the host the request
    and the TLS certificate name."""

    scheme: str
    host: str
    port: int
    address: str

    @classmethod
    def of(cls, url: str, address: str | None = None) -> Origin:
        """The origin of ``url``, connected to at ``address`` (default: its host)."""
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, host, port, address or host)

    def host_header(self) -> str:
        """``Host``: the name, with the port unless it is the scheme's default."""
        default = 443 if self.scheme == "https" else 80
        name = f"[{self.host}]" if ":" in self.host else self.host
        return name if self.port == default else f"{name}:{self.port}"


@dataclass
class Http1Pool:
    """Keep-alive connections by origin, at most ``max_connections`` open at once."""

    max_connections: int = 1_000
    _idle: dict[Origin, list[_Connection]] = field(default_factory=dict)
    _slots: asyncio.Semaphore | None = None
    _tls: ssl.SSLContext | None = None

    async def post(self, url: str, origin: Origin, headers: dict[str, str], body: bytes) -> Answer:
        """POST ``body`` to ``url`` through ``origin``; any error leaves no connection behind."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_connections)
        request = _request(url, origin, headers, body)
        async with self._slots:
            pooled = self._pooled(origin)
            if pooled is not None:
                try:
                    return await self._send(pooled, origin, request)
                except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError) as exc:
                    if isinstance(exc, asyncio.IncompleteReadError) and exc.partial:
                        raise
                    # The endpoint closed the idle connection as it was reused: nothing was
                    # answered, so the POST goes again on a new one (the endpoint may, rarely,
                    # see it twice: delivery is at least once anyway).
            return await self._send(await self._connect(origin), origin, request)

    async def _send(self, connection: _Connection, origin: Origin, request: bytes) -> Answer:
        try:
            answer, reusable = await _exchange(connection, request)
        except BaseException:
            connection.close()
            raise
        if reusable:
            connection.idle_since = time.monotonic()
            self._idle.setdefault(origin, []).append(connection)
        else:
            connection.close()
        return answer

    async def close(self) -> None:
        """Close every pooled connection."""
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()

    def _pooled(self, origin: Origin) -> _Connection | None:
        idle, now = self._idle.get(origin), time.monotonic()
        while idle:
            connection = idle.pop()
            if connection.usable(now):
                return connection
            connection.close()
        return None

    async def _connect(self, origin: Origin) -> _Connection:
        tls = None
        if origin.scheme == "https":
            if self._tls is None:
                self._tls = ssl.create_default_context()
            tls = self._tls
        reader, writer = await asyncio.open_connection(
            origin.address,
            origin.port,
            ssl=tls,
            server_hostname=origin.host if tls is not None else None,
            limit=_HEAD_LIMIT,
        )
        return _Connection(reader, writer)


def _request(url: str, origin: Origin, headers: dict[str, str], body: bytes) -> bytes:
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    lines = [f"POST {target} HTTP/1.1", f"Host: {origin.host_header()}"]
    lines += [f"{name}: {value}" for name, value in headers.items() if name.lower() != "host"]
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


async def _exchange(connection: _Connection, request: bytes) -> tuple[Answer, bool]:
    """Send one request, read its answer: (the answer, whether the connection can be reused)."""
    connection.writer.write(request)
    await connection.writer.drain()
    status, headers = _parse_head(await connection.reader.readuntil(b"\r\n\r\n"))
    while 100 <= status < 200:  # an interim answer (100 Continue, 103): the final one follows
        status, headers = _parse_head(await connection.reader.readuntil(b"\r\n\r\n"))
    if status in _NO_BODY:  # never a body, whatever the headers say (RFC 9112 §6.3)
        body, complete = b"", True
    else:
        body, complete = await _read_body(connection.reader, headers)
    keep = complete and headers.get("connection", "").lower() != "close"
    return Answer(status, headers, body), keep


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    status_line, *lines = head.decode("latin-1").split("\r\n")
    version, _, rest = status_line.partition(" ")
    if not version.startswith("HTTP/1."):
        raise ConnectionError(f"not an HTTP/1.x answer: {status_line[:60]!r}")
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    if version == "HTTP/1.0" and headers.get("connection", "").lower() != "keep-alive":
        headers["connection"] = "close"  # HTTP/1.0 closes after each answer unless it says so
    return int(rest[:3]), headers


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> tuple[bytes, bool]:
    """The answer's body (up to the limit), and whether it was read to its end."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return await _read_chunked(reader)
    length = headers.get("content-length")
    if length is not None and length.isdigit():
        size = int(length)
        if size > _BODY_LIMIT:
            return await reader.readexactly(_BODY_LIMIT), False
        return await reader.readexactly(size), True
    return await reader.read(_BODY_LIMIT), False  # delimited by the connection's close


async def _read_chunked(reader: asyncio.StreamReader) -> tuple[bytes, bool]:
    body = b""
    while len(body) <= _BODY_LIMIT:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                pass
            return body, True
        body += await reader.readexactly(size)
        await reader.readexactly(2)
    return body, False
