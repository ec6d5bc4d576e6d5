"""The edge guard, first on every routed request.

A NUL character in a request's path or query never reaches a handler: PostgreSQL text cannot
hold NUL, so no name or id with one can exist; a path carrying one is a 404, a query parameter
carrying one is a validation error. Bodies are checked by their schemas (see
:mod:`core.wire_types`).

Every request's waits on PostgreSQL are bounded from here on by the request's
:func:`core.db.deadline` (``QUEUECORE_DATABASE_REQUEST_TIMEOUT_MS``, docs/faults.md).

``OPTIONS`` is answered here, with every method of the route in ``Allow``: Litestar 2's own
answer names only the methods registered before its handler was made (its issue 4169).
"""

from __future__ import annotations

from typing import Any, cast

from litestar.exceptions import NotFoundException, ValidationException
from litestar.routes import HTTPRoute
from litestar.types import ASGIApp, Receive, Scope, Send

from core import db, settings

_NUL_IN_QUERY = (b"%00", b"\x00")
_METHODS_STATE = "qc_methods_by_path"


def edge_guard_middleware(app: ASGIApp) -> ASGIApp:
    """Refuse a routed request whose path or query holds a NUL character; bound its waits on
    PostgreSQL."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            _check(scope)
            if scope.get("method") == "OPTIONS":
                await _allow(scope, send)
                return
        with db.deadline(db.request_budget_s(settings.database())):  # settings are cached
            await app(scope, receive, send)

    return middleware


async def _allow(scope: Scope, send: Send) -> None:
    """204 with the route's methods in ``Allow``."""
    template = cast(str, scope.get("path_template", ""))
    methods = _methods_by_path(scope["app"]).get(template, {"OPTIONS"})
    allow = ", ".join(sorted(methods)).encode()
    start: Any = {"type": "http.response.start", "status": 204, "headers": [(b"allow", allow)]}
    await send(start)
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def _methods_by_path(app: Any) -> dict[str, set[str]]:
    """Every HTTP route's methods by its path template, made once per application."""
    known = app.state.get(_METHODS_STATE)
    if known is None:
        known = {r.path_format: set(r.methods) for r in app.routes if isinstance(r, HTTPRoute)}
        app.state[_METHODS_STATE] = known
    return cast(dict[str, set[str]], known)


def _check(scope: Scope) -> None:
    if "\x00" in scope["path"]:
        raise NotFoundException("No resource has a NUL character in its name")
    query = bytes(scope.get("query_string", b""))
    if any(marker in query for marker in _NUL_IN_QUERY):
        raise ValidationException("Query parameters cannot contain a NUL character")
