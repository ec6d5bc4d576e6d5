"""Push groups: their settings, and checking a push request in the endpoint's web handler.

A push group's messages are POSTed to its endpoint, each signed with the group's secret
(``QueueCore-Signature: v1=`` and the HMAC-SHA256 of ``{timestamp}.{body}``). :func:`verify_push`
checks the signature over the raw body and the timestamp's freshness, and returns the message.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from queuecore.errors import QueueCoreError
from queuecore.models import Duration, duration_wire, parse_time

DEFAULT_TOLERANCE_S = 300.0


@dataclass(frozen=True)
class PushConfig:
    """Deliver a group to ``endpoint`` (https): at most ``max_in_flight`` POSTs at once (1 to 1000),
    each failing after ``timeout`` (up to 10 min); ``ordered``: one at a time per key."""

    endpoint: str
    max_in_flight: int = 10
    timeout: Duration = "30s"
    ordered: bool = False

    def wire(self, rotate_secret: bool = False) -> dict[str, Any]:
        """The ``push`` object of a group's PUT."""
        body: dict[str, Any] = {
            "endpoint": self.endpoint,
            "maxInFlight": self.max_in_flight,
            "timeout": duration_wire(self.timeout),
            "ordered": self.ordered,
        }
        if rotate_secret:
            body["rotateSecret"] = True
        return body


@dataclass(frozen=True)
class PushTestResult:
    """What a push group's endpoint answered a test push."""

    delivered: bool
    status_code: int | None
    error: str | None
    elapsed_ms: int

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> PushTestResult:
        """Build from the API's JSON."""
        return cls(body["delivered"], body["statusCode"], body["error"], body["elapsedMs"])


@dataclass(frozen=True)
class PushMessage:
    """A message a push request carries, once its signature and timestamp were checked."""

    message_id: str
    topic: str
    group: str
    partition: int
    offset: int
    attempt: int
    timestamp: datetime
    key: str | None
    headers: dict[str, str]
    data: Any
    event: str  # "message", or "push.test" for a test push
    delivery_id: str  # new for every attempt; ``message_id`` is the same on each
    encoding: str | None = field(default=None)


class PushVerificationError(QueueCoreError):
    """A push request that did not come from QueueCore, or came too late: answer it 401."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message, 401, "")


def verify_push(
    secret: str,
    headers: Mapping[str, str],
    body: bytes | str,
    *,
    tolerance: float = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> PushMessage:
    """The message of a push request, after checking that ``QueueCore-Signature`` is the
    group's signature of this raw ``body`` and that ``QueueCore-Timestamp`` is within
    ``tolerance`` seconds of ``now`` (a replayed request is refused).

    Raises :class:`PushVerificationError` (``INVALID_PUSH_SIGNATURE`` or
    ``STALE_PUSH_TIMESTAMP``). ``headers`` is any mapping of the request's headers (names in
    any case).
    """
    raw = body.encode() if isinstance(body, str) else bytes(body)
    found = {name.lower(): value for name, value in headers.items()}
    signature = found.get("queuecore-signature", "")
    timestamp = found.get("queuecore-timestamp", "")
    if not timestamp.isdigit():
        raise PushVerificationError("INVALID_PUSH_SIGNATURE", "no QueueCore-Timestamp header")
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + raw, hashlib.sha256)
    if not hmac.compare_digest(signature.encode(), b"v1=" + digest.hexdigest().encode()):
        raise PushVerificationError(
            "INVALID_PUSH_SIGNATURE", "the signature is not the group's signature of this body"
        )
    age = (time.time() if now is None else now) - int(timestamp)
    if abs(age) > tolerance:
        when = f"{age:.0f} s ago" if age > 0 else f"{-age:.0f} s ahead"
        raise PushVerificationError(
            "STALE_PUSH_TIMESTAMP", f"signed {when}, more than {tolerance:g} s from now"
        )
    return _message(json.loads(raw), found)


def _message(body: dict[str, Any], headers: dict[str, str]) -> PushMessage:
    return PushMessage(
        message_id=body["messageId"],
        topic=body["topic"],
        group=body["group"],
        partition=body["partition"],
        offset=body["offset"],
        attempt=body["attempt"],
        timestamp=parse_time(body["timestamp"]),
        key=body.get("key"),
        headers=dict(body.get("headers") or {}),
        data=body.get("data"),
        event=headers.get("queuecore-event", "message"),
        delivery_id=headers.get("queuecore-delivery", ""),
        encoding=body.get("encoding"),
    )
