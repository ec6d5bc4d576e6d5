"""An asyncio S3 client for the write path's PUTs: AWS SigV4 over keep-alive HTTP/1.1.

boto3 spends about 2 ms of CPU on one small PUT on this class of machine (request model, event
hooks, retries, urllib3) and blocks a thread while it waits; the segment writer does one PUT per
flush, hundreds per second, so that cost decided both its throughput and its latency. This client
does the two operations of the hot paths, PutObject (every flush) and ranged GetObject (a block
a consumer needs that this process did not write), on the event loop in about 0.25 ms of CPU.
Everything else (DELETE, LIST, HEAD) stays on boto3.

It speaks to AWS S3, MinIO and SeaweedFS alike: path-style URLs (as the boto3 client is configured),
SigV4 with the payload's SHA-256 as ``x-amz-content-sha256`` (so the server verifies the bytes it
stores), session tokens from the credential chain, TLS for ``https`` endpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import socket
import ssl
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import quote, urlsplit

CONNECT_TIMEOUT_S = 2.0
REQUEST_TIMEOUT_S = 5.0  # per attempt; a timeout is not retried (docs/faults.md)
MAX_IDLE_CONNECTIONS = 16
# Larger PUTs go from the event loop: a blocking send of a big body takes the socket buffer in
# several calls, and the thread waits for the GIL between them (batched PUTs p50 ~30 % slower).
THREAD_PUT_MAX_BYTES = 64 * 1024
RETRYABLE_STATUSES = frozenset({500, 502, 503, 504})


class Credentials(NamedTuple):
    """An access key pair, and the session token of temporary credentials."""

    access_key: str
    secret_key: str
    token: str | None = None


CredentialsProvider = Callable[[], Credentials]


class S3RequestFailed(Exception):
    """The server answered with an error status (``code`` from its XML body when it has one)."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(f"S3 answered {status} {code}: {detail}"[:300])
        self.status = status
        self.code = code


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where requests go: ``https://s3.<region>.amazonaws.com`` unless an endpoint URL is set."""

    scheme: str
    host: str
    port: int
    host_header: str
    base_path: str

    @classmethod
    def parse(cls, endpoint_url: str | None, region: str) -> Endpoint:
        """From ``QUEUECORE_S3_ENDPOINT_URL`` (or AWS's regional endpoint when unset)."""
        parts = urlsplit(endpoint_url or f"https://s3.{region}.amazonaws.com")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) endpoint URL: {endpoint_url!r}")
        default_port = 443 if parts.scheme == "https" else 80
        port = parts.port or default_port
        host = parts.hostname
        header = host if port == default_port else f"{host}:{port}"
        return cls(parts.scheme, host, port, header, parts.path.rstrip("/"))


class SigV4Signer:
    """AWS Signature Version 4 for S3 requests; the derived signing key is cached per day."""

    def __init__(self, region: str, credentials: CredentialsProvider) -> None:
        self.region = region
        self.credentials = credentials
        self._keys: dict[tuple[str, str], bytes] = {}

    def headers(
        self, method: str, host: str, path: str, payload_sha256: str, now: float | None = None
    ) -> dict[str, str]:
        """The headers that authorise ``method path`` with a body hashing to ``payload_sha256``."""
        creds = self.credentials()
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        day = stamp[:8]
        headers = {"host": host, "x-amz-content-sha256": payload_sha256, "x-amz-date": stamp}
        if creds.token:
            headers["x-amz-security-token"] = creds.token
        names = sorted(headers)
        signed = ";".join(names)
        canonical = "\n".join(
            (
                method,
                path,
                "",
                "".join(f"{name}:{headers[name]}\n" for name in names),
                signed,
                payload_sha256,
            )
        )
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = "\n".join(
            ("AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest())
        )
        signature = hmac.new(self._key(day, creds.secret_key), to_sign.encode(), "sha256")
        headers["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={creds.access_key}/{scope}, "
            f"SignedHeaders={signed}, Signature={signature.hexdigest()}"
        )
        return headers

    def _key(self, day: str, secret: str) -> bytes:
        cached = self._keys.get((day, secret))
        if cached is None:
            cached = ("AWS4" + secret).encode()
            for part in (day, self.region, "s3", "aws4_request"):
                cached = hmac.new(cached, part.encode(), "sha256").digest()
            self._keys = {(day, secret): cached}  # keep only today's
        return cached


class _Response(NamedTuple):
    status: int
    body: bytes
    keep_alive: bool


class _Connection:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def request(self, head: bytes, body: bytes) -> _Response:
        self.writer.write(head + body if len(body) < 65536 else head)
        if len(body) >= 65536:
            self.writer.write(body)
        await self.writer.drain()
        meta = _Meta(await self.reader.readuntil(b"\r\n"))
        while (line := await self.reader.readuntil(b"\r\n")) != b"\r\n":
            meta.header(line)
        if meta.chunked:
            payload = await self._chunked()
        else:
            payload = await self.reader.readexactly(meta.length)
        return _Response(meta.status, payload, meta.keep_alive)

    async def _chunked(self) -> bytes:
        parts = []
        while size := int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16):
            parts.append(await self.reader.readexactly(size))
            await self.reader.readexactly(2)
        while await self.reader.readuntil(b"\r\n") != b"\r\n":
            pass  # trailers
        return b"".join(parts)

    def close(self) -> None:
        self.writer.close()


class _Meta:
    """The status and framing of a response, from its status line and header lines."""

    __slots__ = ("chunked", "keep_alive", "length", "status")

    def __init__(self, status_line: bytes) -> None:
        parts = status_line.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
            raise ConnectionError(f"not an HTTP response: {status_line[:60]!r}")
        self.status = int(parts[1])
        self.length, self.chunked = 0, False
        self.keep_alive = not status_line.startswith(b"HTTP/1.0")

    def header(self, line: bytes) -> None:
        """Take one header line into account."""
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            self.length = int(value)
        elif name == b"transfer-encoding":
            self.chunked = b"chunked" in value.lower()
        elif name == b"connection":
            self.keep_alive = b"close" not in value.lower()


class _BlockingConnection:
    """One keep-alive HTTP/1.1 connection on a blocking socket, used by one thread at a time.

    PUTs go through these from a small thread pool (see :meth:`S3HttpClient.put_object`).
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = sock.makefile("rb")

    def request(self, head: bytes, body: bytes) -> _Response:
        if len(body) < 65536:
            self.sock.sendall(head + body)
        else:
            self.sock.sendall(head)
            self.sock.sendall(body)
        meta = _Meta(self._line())
        while (line := self._line()) != b"\r\n":
            meta.header(line)
        payload = self._chunked() if meta.chunked else self._exactly(meta.length)
        return _Response(meta.status, payload, meta.keep_alive)

    def _line(self) -> bytes:
        line = self.reader.readline(65536)
        if not line.endswith(b"\n"):
            raise ConnectionError("the connection closed inside a response")
        return line

    def _exactly(self, size: int) -> bytes:
        data = self.reader.read(size) if size else b""
        if len(data) != size:
            raise ConnectionError("the connection closed inside a response body")
        return data

    def _chunked(self) -> bytes:
        parts = []
        while size := int(self._line().split(b";")[0], 16):
            parts.append(self._exactly(size))
            self._exactly(2)
        while self._line() != b"\r\n":
            pass  # trailers
        return b"".join(parts)

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


class S3HttpClient:
    """PutObject and ranged GetObject over small pools of keep-alive connections.

    Requests run on the event loop. With ``put_threads`` (``QUEUECORE_S3_PUT_THREADS``) small
    PUTs are sent from that many threads on blocking sockets instead: writing a request to a
    server on the same host wakes it, and on a busy machine the kernel then often runs the
    server while the writing thread is still inside ``send`` — on the event loop, that stalls
    every request of the process for up to milliseconds (docs/decisions.md, "PUTs from their
    own threads").
    """

    def __init__(
        self,
        endpoint: Endpoint,
        signer: SigV4Signer,
        *,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        put_threads: int = 0,
    ) -> None:
        self.endpoint = endpoint
        self.signer = signer
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self._idle: list[_Connection] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tls = ssl.create_default_context() if endpoint.scheme == "https" else None
        self._idle_blocking: list[_BlockingConnection] = []
        self._threads: ThreadPoolExecutor | None = None
        self.put_threads = put_threads  # 0: PUTs go from the event loop, as GETs do

    async def put_object(self, bucket: str, key: str, data: bytes) -> None:
        """Store ``data`` as ``bucket/key``; raises :class:`S3RequestFailed` or ``OSError``.

        Runs in one of ``put_threads`` threads (the event loop only waits for it), or on the
        event loop when that is 0 or the body is over :data:`THREAD_PUT_MAX_BYTES`.
        """
        if not self.put_threads or len(data) > THREAD_PUT_MAX_BYTES:
            await self._request("PUT", self._path(bucket, key), {}, data)
            return
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self.put_threads, thread_name_prefix="s3-put")
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._threads, self._put_blocking, self._path(bucket, key), data)

    async def get_object(
        self, bucket: str, key: str, start: int | None = None, end: int | None = None
    ) -> bytes:
        """The object, or its inclusive byte range ``start``..``end``.

        Raises :class:`S3RequestFailed` (404 ``NoSuchKey`` for a missing key) or ``OSError``.
        """
        extra = {} if start is None else {"range": f"bytes={start}-{'' if end is None else end}"}
        return await self._request("GET", self._path(bucket, key), extra, b"")

    def _path(self, bucket: str, key: str) -> str:
        return quote(f"{self.endpoint.base_path}/{bucket}/{key}", safe="/-_.~")

    async def _request(self, method: str, path: str, extra: dict[str, str], body: bytes) -> bytes:
        digest = hashlib.sha256(body).hexdigest()
        for attempt in (1, 2):
            headers = self.signer.headers(method, self.endpoint.host_header, path, digest)
            head = _head(method, path, {**headers, **extra}, len(body))
            try:
                response = await self._send(head, body)
            except TimeoutError:
                raise  # a stalled S3 is not retried: the request's time is spent
            except (OSError, asyncio.IncompleteReadError):
                if attempt == 2:
                    raise
                self.close()  # most often pooled connections the server had closed
                continue
            if _answered(response, attempt):
                return response.body
        raise AssertionError("unreachable")

    def _put_blocking(self, path: str, body: bytes) -> None:
        """:meth:`_request` for a PUT, on a blocking socket, in a thread of the PUT pool."""
        digest = hashlib.sha256(body).hexdigest()  # releases the GIL for bodies over 2 KiB
        for attempt in (1, 2):
            headers = self.signer.headers("PUT", self.endpoint.host_header, path, digest)
            head = _head("PUT", path, headers, len(body))
            try:
                response = self._send_blocking(head, body)
            except TimeoutError:
                raise  # a stalled S3 is not retried: the request's time is spent
            except OSError:
                if attempt == 2:
                    raise
                self._close_blocking()  # most often pooled connections the server had closed
                continue
            if _answered(response, attempt):
                return
        raise AssertionError("unreachable")

    def _send_blocking(self, head: bytes, body: bytes) -> _Response:
        try:
            connection = self._idle_blocking.pop()  # list.pop is atomic: no lock needed
        except IndexError:
            connection = self._connect_blocking()
        try:
            response = connection.request(head, body)
        except BaseException:
            connection.close()
            raise
        if response.keep_alive and len(self._idle_blocking) < MAX_IDLE_CONNECTIONS:
            self._idle_blocking.append(connection)
        else:
            connection.close()
        return response

    def _connect_blocking(self) -> _BlockingConnection:
        address = (self.endpoint.host, self.endpoint.port)
        sock = socket.create_connection(address, timeout=self.connect_timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is not None:
            sock = self._tls.wrap_socket(sock, server_hostname=self.endpoint.host)
        sock.settimeout(self.request_timeout_s)  # per read or write: a stall fails in time
        return _BlockingConnection(sock)

    def _close_blocking(self) -> None:
        while self._idle_blocking:
            with contextlib.suppress(IndexError, OSError):
                self._idle_blocking.pop().close()

    async def _send(self, head: bytes, body: bytes) -> _Response:
        connection = await self._connection()
        try:
            async with asyncio.timeout(self.request_timeout_s):
                response = await connection.request(head, body)
        except BaseException:
            connection.close()
            raise
        if response.keep_alive and len(self._idle) < MAX_IDLE_CONNECTIONS:
            self._idle.append(connection)
        else:
            connection.close()
        return response

    async def _connection(self) -> _Connection:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # connections belong to the loop that opened them
            self._idle, self._loop = [], loop
        if self._idle:
            return self._idle.pop()
        async with asyncio.timeout(self.connect_timeout_s):
            reader, writer = await asyncio.open_connection(
                self.endpoint.host,
                self.endpoint.port,
                ssl=self._tls,
                server_hostname=self.endpoint.host if self._tls else None,
            )
        return _Connection(reader, writer)

    def close(self) -> None:
        """Close the idle connections."""
        for connection in self._idle:
            connection.close()
        self._idle = []
        self._close_blocking()


def _answered(response: _Response, attempt: int) -> bool:
    """True for a success; False to retry a server error once; raises for any other error."""
    if response.status < 300:
        return True
    if attempt == 2 or response.status not in RETRYABLE_STATUSES:
        raise S3RequestFailed(response.status, *_error_of(response.body))
    return False


def _head(method: str, path: str, headers: dict[str, str], length: int) -> bytes:
    lines = [f"{method} {path} HTTP/1.1"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if length or method == "PUT":
        lines.append(f"content-length: {length}")
    lines += ["", ""]
    return "\r\n".join(lines).encode()


def _error_of(body: bytes) -> tuple[str, str]:
    """``(Code, Message)`` of an S3 XML error body, as far as it has them."""
    text = body.decode(errors="replace")

    def element(name: str) -> str:
        start = text.find(f"<{name}>")
        end = text.find(f"</{name}>")
        return text[start + len(name) + 2 : end] if 0 <= start < end else ""

    return element("Code") or "Unknown", element("Message") or text[:200]
