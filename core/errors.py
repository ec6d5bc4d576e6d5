"""Error types shared by every domain package.

Errors carry a stable ``code`` and their data; whether one is the client's fault or the server's
is its base class. ``control_plane.edge.errors`` maps them to HTTP in one place.
"""

from __future__ import annotations

from typing import Any, ClassVar


class QueueCoreError(Exception):
    """Base of every error QueueCore reports to a caller."""

    code: ClassVar[str] = "INTERNAL_ERROR"

    def __init__(self, message: str, **data: Any) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class ClientError(QueueCoreError):
    """The request cannot succeed as sent (4xx)."""

    code = "BAD_REQUEST"


class ServerError(QueueCoreError):
    """QueueCore could not serve a valid request (5xx)."""

    code = "INTERNAL_ERROR"


class NotFound(ClientError):
    """The resource does not exist in the caller's environment."""

    code = "NOT_FOUND"


class Conflict(ClientError):
    """The request conflicts with the resource's current state."""

    code = "CONFLICT"


class ValidationFailed(ClientError):
    """A field is missing or has a value outside what is allowed."""

    code = "VALIDATION_ERROR"

    def __init__(self, message: str, field: str | None = None, **data: Any) -> None:
        super().__init__(message, field=field, **data)
        self.field = field


class Unavailable(ServerError):
    """A backing service (PostgreSQL, S3, Redis) is unreachable; retry later."""

    code = "SERVICE_UNAVAILABLE"
