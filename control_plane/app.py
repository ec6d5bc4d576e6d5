"""The composition root: :func:`create_app` wires controllers, handlers, hooks and lifespan."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager

import anyio.to_thread
from litestar import Litestar
from litestar.config.compression import CompressionConfig
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import Components, SecurityScheme
from litestar.types import ControllerRouterHandler

from control_plane.api.v1 import v1_router
from control_plane.apidocs import OfflineSwaggerPlugin, add_framing_headers
from control_plane.dashboard import dashboard_route_handlers, dashboard_templates
from control_plane.dashboard.sessions import SessionController
from control_plane.edge.auth import key_authentication
from control_plane.edge.bodies import ApiRequest
from control_plane.edge.errors import EXCEPTION_HANDLERS
from control_plane.edge.guard import edge_guard_middleware
from control_plane.edge.health import HealthController
from control_plane.edge.openapi_errors import document_errors
from control_plane.edge.openapi_rules import document_rules
from control_plane.edge.rate_limit import rate_limiting
from control_plane.edge.request_id import add_request_id_header, request_id_middleware
from control_plane.edge.resources import Runtime
from control_plane.edge.shutdown import install_drain_on_sigterm
from control_plane.edge.tracing import tracing_plugins
from core import settings
from core.gc_tuning import freeze_startup_heap
from observability import logging as qc_logging
from observability import telemetry

API_VERSION = "1.0.0"


Lifespan = Callable[[Litestar], AbstractAsyncContextManager[None]]


def create_app(
    extra_route_handlers: Sequence[ControllerRouterHandler] = (),
    extra_lifespans: Sequence[Lifespan] = (),
) -> Litestar:
    """Build the QueueCore API application from the ``QUEUECORE_*`` settings.

    ``extra_lifespans`` run after the app's own (the process's resources, data plane, rate
    limiter and key authenticator are open by then) and stop before them.
    """
    qc_logging.configure(settings.logs())
    runtime = Runtime()
    return Litestar(
        route_handlers=[
            HealthController,
            SessionController,
            v1_router(),
            *dashboard_route_handlers(),
            *extra_route_handlers,
        ],
        template_config=dashboard_templates(),
        lifespan=[runtime.lifespan, rate_limiting, key_authentication, *extra_lifespans],
        dependencies=runtime.dependencies(),
        on_startup=[document_errors, document_rules],  # before the document is first served
        exception_handlers=EXCEPTION_HANDLERS,
        request_class=ApiRequest,  # JSON bodies only as JSON, with unique keys
        before_send=[add_request_id_header, add_framing_headers],
        middleware=[request_id_middleware, edge_guard_middleware],
        plugins=tracing_plugins(),
        openapi_config=OpenAPIConfig(
            title="QueueCore API",
            version=API_VERSION,
            description="Multi-tenant pub/sub on object storage.",
            path="/schema",
            render_plugins=[OfflineSwaggerPlugin("QueueCore API")],
            components=Components(
                security_schemes={
                    "apiKey": SecurityScheme(
                        type="http",
                        scheme="bearer",
                        description="pq_live_sk_… or pq_test_sk_… API key",
                    )
                }
            ),
        ),
        compression_config=CompressionConfig(backend="gzip", minimum_size=1024),
        logging_config=None,
        debug=False,
    )


def create_server_app(extra_lifespans: Sequence[Lifespan] = ()) -> Litestar:
    """:func:`create_app` for a ``queuecore serve`` worker: with telemetry (set up here, in the
    server process, before the app binds to it) and a tuned garbage collector."""
    telemetry.setup(settings.telemetry(), role="api")
    app = create_app(extra_lifespans=extra_lifespans)
    app.on_startup.append(freeze_startup_heap)
    app.on_startup.append(install_drain_on_sigterm)
    app.on_shutdown.append(_flush_telemetry)  # runs after the lifespan hooks' own last logs
    return app


async def _flush_telemetry() -> None:
    await anyio.to_thread.run_sync(telemetry.shutdown)
