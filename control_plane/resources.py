"""Long-lived clients of one API process and its data plane, opened and closed by one lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import cast

import redis.asyncio as aioredis
from litestar import Litestar
from litestar.di import Provide

from billing.meter import MeterFlusher, UsageMeter
from control_plane.series import STATE_KEY, ProducerSeries
from core import settings
from core.db import AsyncPool, async_pool
from core.mail import mailer
from core.object_store import ObjectStore
from data_plane.runtime import DataPlane
from observability.object_store import metered_store
from tenants.team.service import TeamService


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
            usage=MeterFlusher(UsageMeter(), db.connection, settings.meter().flush_s),
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


class Runtime:
    """What one API process holds open, built and closed by its lifespan: the resources and the
    data plane. Handlers receive both by dependency injection (:meth:`dependencies`)."""

    def __init__(self) -> None:
        self._resources: Resources | None = None
        self._data_plane: DataPlane | None = None
        self._team: TeamService | None = None

    @asynccontextmanager
    async def lifespan(self, app: Litestar) -> AsyncIterator[None]:
        """Open the resources, start the data plane; close both in reverse when the app stops."""
        resources = Resources.from_settings()
        await resources.open()
        app.state.resources = resources  # for the middleware, which dependency injection skips
        data_plane = DataPlane(
            resources.db, resources.objects, settings.database().url, resources.usage.meter
        )
        self._resources, self._data_plane = resources, data_plane
        self._team = TeamService(resources.db, mailer(settings.mail()), settings.http().public_url)
        app.state.data_plane = data_plane  # for the SIGTERM drain (control_plane.shutdown)
        producers = ProducerSeries.start_if_on(settings.greptime())  # None when switched off
        app.state[STATE_KEY] = producers.activity if producers else None
        try:
            await data_plane.start()
            try:
                yield
            finally:
                await data_plane.close()
        finally:
            if producers is not None:
                await producers.stop()
            await resources.close()

    def resources(self) -> Resources:
        """The open resources (a dependency provider)."""
        if self._resources is None:
            raise RuntimeError("the application's lifespan has not started")
        return self._resources

    def data_plane(self) -> DataPlane:
        """The running data plane (a dependency provider)."""
        if self._data_plane is None:
            raise RuntimeError("the application's lifespan has not started")
        return self._data_plane

    def team(self) -> TeamService:
        """The accounts and teams service (a dependency provider)."""
        if self._team is None:
            raise RuntimeError("the application's lifespan has not started")
        return self._team

    def dependencies(self) -> dict[str, Provide]:
        """``resources``, ``data_plane`` and ``team`` for any handler that names them."""
        return {
            "resources": Provide(self.resources, sync_to_thread=False),
            "data_plane": Provide(self.data_plane, sync_to_thread=False),
            "team": Provide(self.team, sync_to_thread=False),
        }


def resources_of(app: Litestar) -> Resources:
    """The resources opened by :meth:`Runtime.lifespan`, for middleware and lifespan hooks."""
    return cast(Resources, app.state.resources)
