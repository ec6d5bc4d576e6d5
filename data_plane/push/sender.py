"""One push: the JSON body of a message, signed as the alert webhooks are, POSTed to its group's
endpoint through the guard against private addresses, and what came back.

Sans-IO parts (:func:`body_of`, :func:`retry_after_s`) beside the one that does I/O
(:class:`PushSender`, one per pusher process, sharing keep-alive connections among its groups,
through :mod:`data_plane.push.http1`).
"""

from __future__ import annotations

import asyncio
import email.utils
import socket
import ssl
import time
from dataclasses import dataclass

import msgspec

from data_plane.deadletters.webhooks import AddressRefused, headers_for, public_address
from data_plane.push.http1 import Answer, Http1Pool, Origin
from data_plane.read.schemas import ENCODINGS, iso_timestamp
from data_plane.write.segment import Message

USER_AGENT = "QueueCore-Push/1"
MESSAGE_EVENT = "message"
TEST_EVENT = "push.test"
MAX_RETRY_AFTER_S = 86_400.0  # as long as a group's retryDelay may be
MAX_REASON_CHARS = 300
_BODY_SNIPPET_BYTES = 200
_RESOLVED_TTL_S = 10.0


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
    """POSTs pushes over pooled keep-alive connections; every address it connects to was checked
    (unless private addresses are allowed), and redirects are not followed."""

    def __init__(self, allow_private: bool, max_connections: int = 1_000) -> None:
        self.allow_private = allow_private
        self._pool = Http1Pool(max_connections)
        self._resolved: dict[tuple[str, int], tuple[float, str]] = {}

    async def aclose(self) -> None:
        """Close the connections."""
        await self._pool.close()

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
                origin = await self._origin(endpoint)
                answer = await self._pool.post(endpoint, origin, headers, body)
        except TimeoutError:
            return self._failed(f"timed out after {timeout_s:g}s", started)
        except AddressRefused as exc:
            return self._failed(str(exc), started)
        except socket.gaierror as exc:
            return self._failed(f"DNS lookup failed: {exc}", started)
        except ssl.SSLError as exc:
            return self._failed(f"TLS error: {exc}", started)
        except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError):
            return self._failed("ReadError: the connection closed before an answer", started)
        except OSError as exc:
            return self._failed(f"ConnectError: {exc}", started)
        except (ValueError, asyncio.LimitOverrunError) as exc:
            return self._failed(f"ProtocolError: {exc}", started)
        return _outcome(answer, time.monotonic() - started)

    async def _origin(self, endpoint: str) -> Origin:
        """Where to connect: the endpoint's host, or (with the guard on) its checked address,
        the host name kept for TLS. A host's checked address is reused for a few seconds."""
        origin = Origin.of(endpoint)
        if self.allow_private:
            return origin
        key, now = (origin.host, origin.port), time.monotonic()
        hit = self._resolved.get(key)
        if hit is None or hit[0] < now:
            if len(self._resolved) > 10_000:
                self._resolved.clear()
            address = await public_address(origin.host, origin.port)
            hit = self._resolved[key] = (now + _RESOLVED_TTL_S, address)
        return Origin.of(endpoint, hit[1])

    @staticmethod
    def _failed(error: str, started: float) -> PushOutcome:
        return PushOutcome(None, error[:MAX_REASON_CHARS], time.monotonic() - started)


def _outcome(answer: Answer, elapsed_s: float) -> PushOutcome:
    """A 2xx is success; anything else fails with its status and the start of its body."""
    if 200 <= answer.status < 300:
        return PushOutcome(answer.status, None, elapsed_s)
    snippet = answer.body[:_BODY_SNIPPET_BYTES].decode(errors="replace").strip()
    error = f"HTTP {answer.status}" + (f": {snippet}" if snippet else "")
    wait_s = retry_after_s(answer.status, answer.headers.get("retry-after"))
    return PushOutcome(answer.status, error[:MAX_REASON_CHARS], elapsed_s, wait_s)
