"""The ``/v1`` API: every route authenticated by API key and scoped to its environment."""

from __future__ import annotations

from litestar import Router
from litestar.middleware import DefineMiddleware

from control_plane.alerts import AlertsController
from control_plane.anonymous_limit import anonymous_rate_limit_middleware
from control_plane.auth import ApiKeyAuthenticationMiddleware, scope_middleware
from control_plane.consume import ConsumeController
from control_plane.dlq import DeadLetterController
from control_plane.groups import GroupsController
from control_plane.idempotency import IdempotencyController
from control_plane.invoices import InvoicesController
from control_plane.keys import KeysController
from control_plane.lag import LagController
from control_plane.messages import MessagesController
from control_plane.rate_limit import rate_limit_middleware
from control_plane.topics import PublishController, TopicsController
from control_plane.usage import UsageController


def v1_router() -> Router:
    """All ``/v1`` controllers behind key authentication, rate limits and scope checks."""
    return Router(
        path="/v1",
        route_handlers=[
            MessagesController,
            KeysController,
            AlertsController,
            TopicsController,
            PublishController,
            IdempotencyController,
            GroupsController,
            ConsumeController,
            DeadLetterController,
            LagController,
            UsageController,
            InvoicesController,
        ],
        middleware=[
            anonymous_rate_limit_middleware,
            DefineMiddleware(ApiKeyAuthenticationMiddleware),
            rate_limit_middleware,
            scope_middleware,
        ],
        security=[{"apiKey": []}],
    )
