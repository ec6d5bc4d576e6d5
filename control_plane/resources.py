"""Long-lived clients of one API process, opened and closed by the application's lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import redis.asyncio as aioredis
from litestar import Litestar

from infra import settings
from infra.db import AsyncPool, async_pool
from infra.object_store import ObjectStore, metered_store


@dataclass
class Resources:
    """The process's PostgreSQL pool, Redis client and object store."""

    db: AsyncPool
    redis: aioredis.Redis
    objects: ObjectStore

    @classmethod
    def from_settings(cls) -> Resources:
        """Build (without connecting) from the ``QUEUECORE_*`` settings."""
        return cls(
            db=async_pool(settings.database(), "api"),
            redis=aioredis.Redis.from_url(
                settings.redis().url, socket_timeout=2, socket_connect_timeout=2
            ),
            objects=metered_store(settings.object_store()),
        )

    async def open(self) -> None:
        """Start connecting; a service that is down now is retried, not fatal."""
        await self.db.open(wait=False)

    async def close(self) -> None:
        """Release every connection."""
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
