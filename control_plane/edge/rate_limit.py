"""Rate limiting of ``/v1`` routes: the route's ``opt["rate"]``, else its ``opt["scope"]``, names
its category (heartbeats and extends need the consume scope but spend the lease budget).

Runs after key authentication (the budget is per API key) and before the scope check. Every
response of a limited route carries ``X-RateLimit-Limit``, ``-Remaining`` and ``-Reset``; over the
limit the request ends as ``429 RATE_LIMIT_EXCEEDED`` with ``Retry-After``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import cast

import msgspec
from litestar import Litestar
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from control_plane.edge.admission import OrgAdmission, request_bytes
from control_plane.edge.resources import identity_of, resources_of
from tenants.models import AuthContext
from tenants.rate_limits import Decision, RateLimiter
from tenants.tiers import CATEGORIES, TIER_LIMITS, Category, Limits, tier_weight

ANONYMOUS_ORGANISATION = "anonymous"  # never an organisation id: those start with "org_"
ANONYMOUS_PER_S = 50
ANONYMOUS_LIMITS: Limits = msgspec.structs.replace(
    TIER_LIMITS["developer"], admin_per_s=ANONYMOUS_PER_S
)

# A /v1 route that forgot to declare its category gets the strictest one.
DEFAULT_CATEGORY: Category = "admin"


def category_of(scope: Scope) -> Category:
    """The rate-limit category of the matched route handler."""
    handler = scope.get("route_handler")
    named = handler.opt.get("rate") or handler.opt.get("scope") if handler is not None else None
    return cast(Category, named) if named in CATEGORIES else DEFAULT_CATEGORY


@asynccontextmanager
async def rate_limiting(app: Litestar) -> AsyncIterator[None]:
    """Lifespan: the process's limiter, on the process's Redis client."""
    identity = identity_of(app)

    async def load(organisation_id: str) -> Limits:
        if organisation_id == ANONYMOUS_ORGANISATION:  # requests without a key, by address
            return ANONYMOUS_LIMITS
        return await identity.organisation_limits(organisation_id)

    app.state.rate_limiter = RateLimiter(resources_of(app).redis, load)
    app.state.org_admission = OrgAdmission()
    yield


def limiter_of(app: Litestar) -> RateLimiter:
    """The process's limiter, created by :func:`rate_limiting`."""
    return cast(RateLimiter, app.state.rate_limiter)


def rate_limit_middleware(app: ASGIApp) -> ASGIApp:
    """Count each authenticated request against its key's budget for the route's category,
    and in the usage meter of its environment."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        context = scope.get("auth")
        if scope["type"] != "http" or not isinstance(context, AuthContext):
            await app(scope, receive, send)
            return
        category = category_of(scope)
        decision = await count_request(scope, context, category)
        await admitted(app, scope, receive, send, context, category, decision, None)

    return middleware


async def count_request(scope: Scope, context: AuthContext, category: Category) -> Decision:
    """Count the request against its key's budget (429 over it) and meter it."""
    decision = await limiter_of(scope["app"]).check(
        context.organisation_id, context.key_id, category
    )
    # Metered once admitted, whatever its outcome; a 429 is not counted (billing.meter).
    resources_of(scope["app"]).usage.meter.request(context.environment_id, category)
    return decision


async def admitted(
    app: ASGIApp,
    scope: Scope,
    receive: Receive,
    send: Send,
    context: AuthContext,
    category: Category,
    decision: Decision,
    content_length: bytes | None,
) -> None:
    """Run the rest of the request with the rate-limit headers; a publish once its organisation
    has room for it (control_plane.edge.admission; ``content_length`` None: read it here)."""
    if category != "publish":
        await app(scope, receive, _with_headers(send, decision))
        return
    admission: OrgAdmission = scope["app"].state.org_admission
    organisation_id = context.organisation_id
    size = request_bytes(content_length or _content_length(scope))
    await admission.acquire(organisation_id, tier_weight(decision.limit), size)
    try:
        await app(scope, receive, _with_headers(send, decision))
    finally:
        admission.release(organisation_id, size)


def _content_length(scope: Scope) -> bytes | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return bytes(value)
    return None


def _with_headers(send: Send, decision: Decision) -> Send:
    headers = [
        (name.lower().encode(), value.encode()) for name, value in decision.headers().items()
    ]

    async def send_with_headers(message: Message) -> None:
        if message["type"] == "http.response.start":
            # Appended, not set through MutableScopeHeaders (which scans every header per call):
            # handlers never write X-RateLimit-*.
            message["headers"] = [*message.get("headers", ()), *headers]
        await send(message)

    return send_with_headers
