"""A minimal keep-alive HTTP/1.1 client for the load generator.

On this 2-core machine ``httpx`` spends about 1.4 ms of CPU per request, so one load-generator
process could not even offer 1,000 requests per second and would measure itself. Requests here
are built once, up front, and sent as bytes on a persistent connection; a response is read by
its ``Content-Length`` (QueueCore's JSON answers always carry one).
"""

from __future__ import annotations

import asyncio
import contextlib


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
        """Send a pre-built request; the status and body of its response."""
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


def _content_length(head: bytes) -> int:
    for line in head.lower().split(b"\r\n"):
        if line.startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    raise ValueError(f"response without Content-Length: {head[:200]!r}")
