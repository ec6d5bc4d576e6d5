"""The ``/v1`` API: every route authenticated by API key and scoped to its environment."""

from __future__ import annotations

from litestar import Router

from control_plane.api.alerts import AlertsController
from control_plane.api.config import ConfigController
from control_plane.api.consume import ConsumeController
from control_plane.api.dlq import DeadLetterController
from control_plane.api.groups import GroupsController
from control_plane.api.idempotency import IdempotencyController
from control_plane.api.invoices import InvoicesController
from control_plane.api.keys import KeysController
from control_plane.api.lag import LagController
from control_plane.api.messages import MessagesController
from control_plane.api.push import PushController
from control_plane.api.topics import PublishController, TopicsController
from control_plane.api.usage import UsageController
from control_plane.edge.v1_edge import v1_edge_middleware


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
            PushController,
            ConsumeController,
            DeadLetterController,
            LagController,
            UsageController,
            InvoicesController,
            ConfigController,
        ],
        # One pass: anonymous limit, key authentication, rate limit, scope, publish admission.
        middleware=[v1_edge_middleware],
        security=[{"apiKey": []}],
    )
