"""The ``/v1`` API: every route authenticated by API key and scoped to its environment."""

from __future__ import annotations

from litestar import Router
from litestar.middleware import DefineMiddleware

from control_plane.auth import ApiKeyAuthenticationMiddleware, requires_scope
from control_plane.keys import KeysController


def v1_router() -> Router:
    """All ``/v1`` controllers behind key authentication and scope guards."""
    return Router(
        path="/v1",
        route_handlers=[KeysController],
        middleware=[DefineMiddleware(ApiKeyAuthenticationMiddleware)],
        guards=[requires_scope],
        security=[{"apiKey": []}],
    )
