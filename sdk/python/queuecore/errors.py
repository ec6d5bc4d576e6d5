"""One exception hierarchy for everything the API (or the network) can answer.

Every error carries the server's ``code``, ``message``, HTTP ``status`` and the ``request_id``
to quote to support. Transport failures have no status; their ``request_id`` is the id the SDK
sent, so the server's logs can still be searched for the attempt.
"""

from __future__ import annotations

from typing import Any

import httpx


class QueueCoreError(Exception):
    """Base of every error raised by the SDK."""

    def __init__(
        self,
        code: str,
        message: str,
        status: int | None,
        request_id: str,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{code}: {message} (status {status}, request {request_id})")
        self.code = code
        self.message = message
        self.status = status
        self.request_id = request_id
        self.body = body or {}

    @property
    def details(self) -> list[dict[str, Any]]:
        """Per-field validation details, when the server sent any."""
        return list(self.body.get("error", {}).get("details") or [])


class AuthenticationError(QueueCoreError):
    """401: the API key is missing, malformed, unknown, revoked or expired."""


class PermissionDenied(QueueCoreError):
    """403: the key lacks the scope (publish, consume, admin) this call needs."""


class NotFound(QueueCoreError):
    """404: no such topic, group, member or message in the key's environment."""


class Conflict(QueueCoreError):
    """409: the request conflicts with the resource's current state."""


class AckRejected(Conflict):
    """409 ``ACK_REJECTED``: no ack id could be settled (lease expired, superseded or unknown)."""

    @property
    def rejected(self) -> list[dict[str, str]]:
        """``[{"ackId", "reason"}]`` for every id the server refused."""
        return list(self.body.get("rejected") or [])


class LeaseExpired(QueueCoreError):
    """Held messages whose leases ended before they were settled (``code`` ``LEASE_EXPIRED``).

    Reported to the consumer's ``error`` callback, never raised by a call: on an exactly-once
    topic such messages are not handed out and their acks are not sent; the group delivers them
    again. It means the consumer held them longer than it could keep their leases.
    """


class ValidationError(QueueCoreError):
    """400 / 422: a field is missing or out of range, or a tier quota was exceeded."""


class PayloadTooLarge(QueueCoreError):
    """413: a message is larger than the tier allows."""


class RateLimited(QueueCoreError):
    """429: the key used up its per-second budget; retried automatically up to max_retries."""

    def __init__(self, *args: Any, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.retry_after = retry_after


class ServerError(QueueCoreError):
    """5xx: QueueCore could not serve a valid request."""


class Unavailable(ServerError):
    """503: a backing service is unreachable; safe calls are retried automatically."""


class PublishOutcomeUnknown(Unavailable):
    """503 ``PUBLISH_OUTCOME_UNKNOWN``: the publish may or may not have been stored.

    The SDK retries it with the same idempotency key (the server stores it once) and, when the
    retries run out, looks the key up; this error means neither settled it. ``idempotency_key``
    is the key to look up later or to publish again with: that cannot store it twice.
    """

    idempotency_key: str | None = None


class APIConnectionError(QueueCoreError):
    """The request failed on the network: no answer was received."""


class APITimeoutError(APIConnectionError):
    """The request timed out."""


_BY_CODE: dict[str, type[QueueCoreError]] = {
    "ACK_REJECTED": AckRejected,
    "PUBLISH_OUTCOME_UNKNOWN": PublishOutcomeUnknown,
}
_BY_STATUS: dict[int, type[QueueCoreError]] = {
    400: ValidationError,
    401: AuthenticationError,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: ValidationError,
    429: RateLimited,
    503: Unavailable,
}
# The HTTP status of codes that arrive without one (SSE ``error`` events).
STATUS_BY_CODE = {
    "INVALID_API_KEY": 401,
    "FORBIDDEN": 403,
    "MEMBER_NOT_FOUND": 404,
    "GROUP_NOT_FOUND": 404,
    "TOPIC_NOT_FOUND": 404,
    "SERVICE_UNAVAILABLE": 503,
}


def error_class(code: str, status: int) -> type[QueueCoreError]:
    """The exception class for a code and status."""
    if code in _BY_CODE:
        return _BY_CODE[code]
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return ServerError if status >= 500 else QueueCoreError


def error_from_response(response: httpx.Response, sent_request_id: str) -> QueueCoreError:
    """Build the exception for an error response, from its ``{"error": {...}}`` body."""
    body = _json_object(response)
    found = body.get("error")
    error: dict[str, Any] = found if isinstance(found, dict) else {}
    status = response.status_code
    code = str(error.get("code") or f"HTTP_{status}")
    message = str(error.get("message") or response.reason_phrase or "request failed")
    request_id = str(
        error.get("requestId") or response.headers.get("x-request-id") or sent_request_id
    )
    cls = error_class(code, status)
    if cls is RateLimited:
        return RateLimited(
            code, message, status, request_id, body, retry_after=retry_after_s(response)
        )
    return cls(code, message, status, request_id, body)


def error_from_event(data: dict[str, Any], request_id: str) -> QueueCoreError:
    """Build the exception for an SSE ``error`` event ``{code, message}``."""
    code = str(data.get("code") or "SERVICE_UNAVAILABLE")
    status = STATUS_BY_CODE.get(code, 503)
    message = str(data.get("message") or "the stream ended")
    return error_class(code, status)(code, message, status, request_id, {"error": data})


def retry_after_s(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds (only the delta-seconds form is used by QueueCore)."""
    value = response.headers.get("retry-after")
    try:
        return max(float(value), 0.0) if value is not None else None
    except ValueError:
        return None


def _json_object(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
