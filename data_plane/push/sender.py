"""One push: the JSON body of a message, signed as the alert webhooks are, POSTed to its group's
endpoint through the guard against private addresses, and what came back.

Sans-IO parts (:func:`body_of`, :func:`retry_after_s`) beside the one that does I/O
(:class:`PushSender`, one per pusher process, sharing keep-alive connections among its groups).
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from dataclasses import dataclass

import httpx
import msgspec

from data_plane.deadletters.webhooks import AddressRefused, headers_for, public_address
from data_plane.read.schemas import ENCODINGS, iso_timestamp
from data_plane.write.segment import Message

USER_AGENT = "QueueCore-Push/1"
MESSAGE_EVENT = "message"
TEST_EVENT = "push.test"
MAX_RETRY_AFTER_S = 86_400.0  # as long as a group's retryDelay may be
MAX_REASON_CHARS = 300
_BODY_SNIPPET_BYTES = 200
_READ_LIMIT_BYTES = 65_536  # more of an answer than this is not read: the connection is dropped
_RESOLVED_TTL_S = 10.0
MAX_TIMEOUT_S = 660.0  # past the longest push timeout (10 min)


class PushBody(msgspec.Struct, rename="camel", omit_defaults=True):
    """What an endpoint receives: the message, where it is, and which attempt this is."""

    message_id: str
    topic: str
    group: str
    partition: int
    offset: int
    attempt: int
    timestamp: str
    key: str | None
    headers: dict[str, str]
    data: msgspec.Raw
    encoding: str | None = None  # "base64" for a Kafka producer's non-JSON value


_encode = msgspec.json.Encoder().encode


def body_of(
    message_id: str,
    topic: str,
    group: str,
    partition: int,
    offset: int,
    attempt: int,
    message: Message,
) -> bytes:
    """The bytes POSTed and signed for one attempt at one message."""
    return _encode(
        PushBody(
            message_id=message_id,
            topic=topic,
            group=group,
            partition=partition,
            offset=offset,
            attempt=attempt,
            timestamp=iso_timestamp(message.timestamp_ms),
            key=None if message.key is None else message.key.decode(errors="replace"),
            headers=message.headers,
            data=msgspec.Raw(message.value),
            encoding=ENCODINGS[message.encoding],
        )
    )


def retry_after_s(status_code: int, header: str | None, now_s: float | None = None) -> float | None:
    """The delay a 429 or 503 asks for in ``Retry-After`` (seconds, or an HTTP date), capped;
    None for other answers or an unreadable header."""
    if status_code not in (429, 503) or not header:
        return None
    value = header.strip()
    if value.isdigit():
        return min(float(value), MAX_RETRY_AFTER_S)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    now_s = time.time() if now_s is None else now_s
    return min(max(when.timestamp() - now_s, 0.0), MAX_RETRY_AFTER_S)


@dataclass(frozen=True, slots=True)
class PushOutcome:
    """What one POST gave: its status, or why there was none; a 429/503's ``Retry-After``."""

    status_code: int | None
    error: str | None
    elapsed_s: float
    retry_after_s: float | None = None

    @property
    def ok(self) -> bool:
        """A 2xx within the timeout: the message is acked."""
        return self.error is None

    @property
    def reason(self) -> str:
        """Why it failed, as a dead letter keeps it."""
        return self.error or ""


class PushSender:
    """POSTs pushes over shared keep-alive connections; every address it connects to was checked
    (unless private addresses are allowed), and redirects are not followed."""

    def __init__(self, allow_private: bool, max_connections: int = 1_000) -> None:
        self.allow_private = allow_private
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=100)
        self._client = httpx.AsyncClient(
            trust_env=False, follow_redirects=False, limits=limits, timeout=MAX_TIMEOUT_S
        )  # each POST also runs under its own, shorter deadline (post)
        self._resolved: dict[tuple[str, int], tuple[float, str]] = {}

    async def aclose(self) -> None:
        """Close the connections."""
        await self._client.aclose()

    async def post(
        self,
        endpoint: str,
        secret: str,
        delivery_id: str,
        body: bytes,
        timeout_s: float,
        event: str = MESSAGE_EVENT,
    ) -> PushOutcome:
        """POST once; a 2xx answered within ``timeout_s`` (connection included) is success."""
        started = time.monotonic()
        headers = headers_for(delivery_id, event, secret, body)
        headers["User-Agent"] = USER_AGENT
        try:
            async with asyncio.timeout(timeout_s):
                url, extensions = await self._pinned(endpoint)
                headers["Host"] = httpx.URL(endpoint).netloc.decode("ascii")
                return await self._send(url, extensions, headers, body, started)
        except TimeoutError:
            return self._failed(f"timed out after {timeout_s:g}s", started)
        except AddressRefused as exc:
            return self._failed(str(exc), started)
        except OSError as exc:
            return self._failed(f"DNS lookup failed: {exc}", started)
        except httpx.HTTPError as exc:
            return self._failed(f"{type(exc).__name__}: {exc}", started)

    async def _send(
        self,
        url: httpx.URL,
        extensions: dict[str, str],
        headers: dict[str, str],
        body: bytes,
        started: float,
    ) -> PushOutcome:
        request = self._client.build_request(
            "POST", url, content=body, headers=headers, extensions=extensions
        )
        response = await self._client.send(request, stream=True)
        try:
            snippet = await _read_some(response)
        finally:
            await response.aclose()
        code = response.status_code
        elapsed = time.monotonic() - started
        if 200 <= code < 300:
            return PushOutcome(code, None, elapsed)
        error = f"HTTP {code}" + (f": {snippet}" if snippet else "")
        wait_s = retry_after_s(code, response.headers.get("Retry-After"))
        return PushOutcome(code, error[:MAX_REASON_CHARS], elapsed, wait_s)

    async def _pinned(self, endpoint: str) -> tuple[httpx.URL, dict[str, str]]:
        """The URL to connect to: the endpoint's, or (with the guard on) its checked address,
        the host name kept for TLS. A host's checked address is reused for a few seconds."""
        url = httpx.URL(endpoint)
        if self.allow_private:
            return url, {}
        port = url.port or (443 if url.scheme == "https" else 80)
        key, now = (url.host, port), time.monotonic()
        hit = self._resolved.get(key)
        if hit is None or hit[0] < now:
            if len(self._resolved) > 10_000:
                self._resolved.clear()
            hit = self._resolved[key] = (
                now + _RESOLVED_TTL_S,
                await public_address(url.host, port),
            )
        return url.copy_with(host=hit[1]), {"sni_hostname": url.host}

    @staticmethod
    def _failed(error: str, started: float) -> PushOutcome:
        return PushOutcome(None, error[:MAX_REASON_CHARS], time.monotonic() - started)


async def _read_some(response: httpx.Response) -> str:
    """The start of an answer's body, as text (it names the failure); a long one is cut."""
    read = b""
    async for chunk in response.aiter_raw():
        read += chunk
        if len(read) >= _READ_LIMIT_BYTES:
            break
    return read[:_BODY_SNIPPET_BYTES].decode(errors="replace").strip()
