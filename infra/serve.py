"""The ``queuecore serve`` application: the HTTP API with the Kafka listener beside it.

Composed here, in the entry-point layer, so neither edge imports the other: the Kafka listener
shares the HTTP app's data plane, key authenticator, rate limiter and usage meter.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from litestar import Litestar

from control_plane.app import create_server_app as create_http_app
from control_plane.edge.rate_limit import limiter_of
from control_plane.edge.resources import resources_of
from core import settings
from data_plane.service import DataPlane
from kafka_protocol.listener import kafka_listeners
from kafka_protocol.session import Services


def create_server_app() -> Litestar:
    """The app a ``queuecore serve`` worker runs (a uvicorn factory)."""
    return create_http_app([kafka_lifespan] if settings.kafka().enabled else [])


@asynccontextmanager
async def kafka_lifespan(app: Litestar) -> AsyncIterator[None]:
    """Run the Kafka listeners on the services the HTTP lifespans opened."""
    config = settings.kafka()
    data_plane: DataPlane = app.state.data_plane
    services = Services(
        data_plane=data_plane,
        authenticator=app.state.key_authenticator,
        limiter=limiter_of(app),
        meter=resources_of(app).usage.meter,
        max_request_bytes=config.max_request_bytes,
        admission=app.state.org_admission,  # shared with REST publishes
    )
    async with kafka_listeners(services, config):
        yield
