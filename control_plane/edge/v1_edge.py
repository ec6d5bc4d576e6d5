"""The ``/v1`` edge in one pass: headers read once, then the anonymous limit, authentication,
the rate limit and metering, the scope check and (publishes) admission, in that order.

It does what the separate layers do (the address limit of
:mod:`control_plane.edge.anonymous_limit`, key authentication and scopes of
:mod:`control_plane.edge.auth`, :mod:`control_plane.edge.rate_limit`, the publish admission of
:mod:`control_plane.edge.admission`), with the same answers: 401 ``INVALID_API_KEY``, 429
``RATE_LIMIT_EXCEEDED`` with ``Retry-After`` (a key's budget, or an address without a key),
403 ``FORBIDDEN`` for a missing scope, and ``X-RateLimit-*`` on every answer of a limited route.
One function instead of four wrapped ones, one scan of the headers instead of three, no
connection object built to read one header.
"""

from __future__ import annotations

from litestar.types import ASGIApp, Receive, Scope, Send

from control_plane.edge.anonymous_limit import count_anonymous
from control_plane.edge.auth import bearer_of, check_scope
from control_plane.edge.rate_limit import admitted, category_of, count_request
from observability.logging import bind
from tenants.authn import KeyAuthenticator


def v1_edge_middleware(app: ASGIApp) -> ASGIApp:
    """Authenticate, limit, meter, check the scope of and admit every ``/v1`` request."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind != "http" and kind != "websocket":
            await app(scope, receive, send)
            return
        authorization = content_length = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                if authorization is None:  # the first one counts, as everywhere else
                    authorization = value
            elif name == b"content-length":
                content_length = value
        if kind == "http" and not _has_bearer(authorization):
            await count_anonymous(scope)
        token = _bearer(authorization)
        authenticator: KeyAuthenticator = scope["app"].state.key_authenticator
        context = await authenticator.authenticate(token)
        bind(**context.log_fields())
        scope["user"] = context.key_id
        scope["auth"] = context
        if kind != "http":
            check_scope(context, scope.get("route_handler"))
            await app(scope, receive, send)
            return
        category = category_of(scope)
        decision = await count_request(scope, context, category)
        check_scope(context, scope.get("route_handler"))
        await admitted(app, scope, receive, send, context, category, decision, content_length)

    return middleware


def _bearer(header: bytes | None) -> str | None:
    """The token of an ``Authorization: Bearer …`` header (as :func:`auth.bearer_token`)."""
    return None if header is None else bearer_of(bytes(header).decode("latin-1"))


def _has_bearer(header: bytes | None) -> bool:
    """Whether the request carries a bearer token at all (as the anonymous limit asks)."""
    if header is None:
        return False
    scheme, _, token = bytes(header).partition(b" ")
    return scheme.lower() == b"bearer" and bool(token.strip())
