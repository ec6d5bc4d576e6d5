"""Long-lived clients of one API process, opened and closed by the application's lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import redis.asyncio as aioredis
from litestar import Litestar

from billing.meter import MeterFlusher, UsageMeter, meter_settings
from core import settings
from core.db import AsyncPool, async_pool
from core.object_store import ObjectStore
from observability.object_store import metered_store


@dataclass
class Resources:
    """The process's PostgreSQL pool, Redis client, object store and usage meter."""

    db: AsyncPool
    redis: aioredis.Redis
    objects: ObjectStore
    usage: MeterFlusher  # usage.meter counts; flushed to usage_hourly in the background

    @classmethod
    def from_settings(cls) -> Resources:
        """Build (without connecting) from the ``QUEUECORE_*`` settings."""
        db = async_pool(settings.database(), "api")
        return cls(
            db=db,
            redis=aioredis.Redis.from_url(
                settings.redis().url, socket_timeout=2, socket_connect_timeout=2
            ),
            objects=metered_store(settings.object_store()),
            usage=MeterFlusher(UsageMeter(), db.connection, meter_settings().flush_s),
        )

    async def open(self) -> None:
        """Start connecting; a service that is down now is retried, not fatal."""
        await self.db.open(wait=False)
        self.usage.start()

    async def close(self) -> None:
        """Release every connection, after the usage meter's last flush."""
        await self.usage.stop()
        await self.db.close()
        await self.redis.aclose()


@asynccontextmanager
async def lifespan(app: Litestar) -> AsyncIterator[None]:
    """Open the process's resources for the application's lifetime."""
    resources = Resources.from_settings()
    await resources.open()
    app.state.resources = resources
    try:
        yield
    finally:
        await resources.close()


def resources_of(app: Litestar) -> Resources:
    """The resources opened by :func:`lifespan`."""
    return app.state.resources
