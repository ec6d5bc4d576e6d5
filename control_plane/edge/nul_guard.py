"""The edge guard: a NUL character in a request's path or query never reaches a handler.

PostgreSQL text cannot hold NUL, so no name or id with one can exist: a path carrying one is a
404, a query parameter carrying one is a validation error. Bodies are checked by their schemas
(see :mod:`core.wire_types`).
"""

from __future__ import annotations

from litestar.exceptions import NotFoundException, ValidationException
from litestar.types import ASGIApp, Receive, Scope, Send

_NUL_IN_QUERY = (b"%00", b"\x00")


def nul_guard_middleware(app: ASGIApp) -> ASGIApp:
    """Refuse a routed request whose path or query holds a NUL character."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            _check(scope)
        await app(scope, receive, send)

    return middleware


def _check(scope: Scope) -> None:
    if "\x00" in scope["path"]:
        raise NotFoundException("No resource has a NUL character in its name")
    query = bytes(scope.get("query_string", b""))
    if any(marker in query for marker in _NUL_IN_QUERY):
        raise ValidationException("Query parameters cannot contain a NUL character")
