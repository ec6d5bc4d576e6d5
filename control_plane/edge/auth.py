"""Authentication of ``/v1`` requests by API key, and scope checks.

Missing, malformed, unknown, revoked and expired keys all get the same ``401 INVALID_API_KEY``.
A valid key without the scope a route needs gets ``403 FORBIDDEN``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from litestar import Litestar
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from litestar.middleware import AbstractAuthenticationMiddleware, AuthenticationResult

from control_plane.edge.resources import identity_of
from observability.logging import bind, get_logger
from tenants.authn import KeyAuthenticator
from tenants.errors import Forbidden, InvalidApiKey
from tenants.models import AuthContext

log = get_logger("queuecore.auth")
LAST_USED_FLUSH_S = 5.0


def bearer_token(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    """The token of an ``Authorization: Bearer …`` header."""
    return bearer_of(connection.headers.get("authorization", ""))


def bearer_of(header: str) -> str | None:
    """The token of an ``Authorization`` header's value when its scheme is ``Bearer``."""
    scheme, _, token = header.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class ApiKeyAuthenticationMiddleware(AbstractAuthenticationMiddleware):
    """Resolves the bearer key to an :class:`AuthContext` available as ``request.auth``."""

    async def authenticate_request(
        self, connection: ASGIConnection[Any, Any, Any, Any]
    ) -> AuthenticationResult:
        """Authenticate, then bind the tenant identity into the request's logs."""
        authenticator: KeyAuthenticator = connection.app.state.key_authenticator
        context = await authenticator.authenticate(bearer_token(connection))
        bind(**context.log_fields())
        return AuthenticationResult(user=context.key_id, auth=context)


def auth_context(connection: ASGIConnection[Any, Any, Any, Any]) -> AuthContext:
    """The authenticated caller of a ``/v1`` route."""
    context = connection.scope.get("auth")
    if not isinstance(context, AuthContext):
        raise InvalidApiKey
    return context


def check_scope(context: AuthContext, handler: BaseRouteHandler | None) -> None:
    """The key must carry the scope named by the route's ``opt["scope"]`` (403 otherwise)."""
    needed = handler.opt.get("scope") if handler is not None else None
    if needed and needed not in context.scopes:
        raise Forbidden(
            f"This API key lacks the '{needed}' scope required for this operation.", scope=needed
        )


async def requires_scope(
    connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler
) -> None:
    """Guard form of :func:`check_scope`, for routers that use guards."""
    check_scope(auth_context(connection), handler)


@asynccontextmanager
async def key_authentication(app: Litestar) -> AsyncIterator[None]:
    """Lifespan: the process's authenticator and the task that flushes last-used times."""
    authenticator = KeyAuthenticator(identity_of(app).authenticate)
    app.state.key_authenticator = authenticator
    flusher = asyncio.create_task(_flush_last_used(app, authenticator))
    try:
        yield
    finally:
        flusher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await flusher
        await _write_last_used(app, authenticator)


async def _flush_last_used(app: Litestar, authenticator: KeyAuthenticator) -> None:
    while True:
        await asyncio.sleep(LAST_USED_FLUSH_S)
        await _write_last_used(app, authenticator)


async def _write_last_used(app: Litestar, authenticator: KeyAuthenticator) -> None:
    used = authenticator.take_used()
    if not used:
        return
    try:
        await identity_of(app).record_key_use(used)
    except Exception as exc:
        log.warning("last_used_flush_failed", error=type(exc).__name__, keys=len(used))
