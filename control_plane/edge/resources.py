"""Long-lived clients of one API process and its data plane, opened and closed by one lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import cast

from litestar import Litestar
from litestar.di import Provide
from redis.asyncio import Redis

from billing.meter import MeterFlusher, UsageMeter
from billing.service import Billing
from control_plane.edge.series import ProducerSeries
from core import settings
from core.db import AsyncPool, async_pool
from core.mail import mailer
from core.object_store import ObjectStore
from core.redis_client import redis_client
from data_plane.service import DataPlane
from observability.object_store import metered_store
from tenants.identity import Identity
from tenants.team.service import TeamService


@dataclass
class Resources:
    """The process's PostgreSQL pool, Redis client, object store and usage meter."""

    db: AsyncPool
    redis: Redis
    objects: ObjectStore
    usage: MeterFlusher  # usage.meter counts; flushed to usage_hourly in the background

    @classmethod
    def from_settings(cls) -> Resources:
        """Build (without connecting) from the ``QUEUECORE_*`` settings."""
        db = async_pool(settings.database(), "api")
        return cls(
            db=db,
            redis=redis_client(settings.redis().url),
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
    services on them (the data plane, identity, teams, billing). Handlers receive them by dependency
    injection (:meth:`dependencies`); middleware and guards, which it does not reach, find them
    in ``app.state``."""

    def __init__(self) -> None:
        self._resources: Resources | None = None
        self._data_plane: DataPlane | None = None
        self._identity: Identity | None = None
        self._team: TeamService | None = None
        self._billing: Billing | None = None

    @asynccontextmanager
    async def lifespan(self, app: Litestar) -> AsyncIterator[None]:
        """Open the resources, start the data plane; close both in reverse when the app stops."""
        resources = Resources.from_settings()
        await resources.open()
        app.state.resources = resources  # for the middleware, which dependency injection skips
        data_plane = DataPlane(
            resources.db,
            resources.objects,
            settings.DataPlaneSettings.from_env(),
            resources.usage.meter,
            resources.redis,  # throttle buckets shared by every replica
        )
        self._resources, self._data_plane = resources, data_plane
        app.state.data_plane = data_plane  # for the SIGTERM drain (control_plane.edge.shutdown)
        self._identity = app.state.identity = Identity(resources.db)
        mail = mailer(settings.mail())
        self._team = app.state.team = TeamService(resources.db, mail, settings.http().public_url)
        self._billing = app.state.billing = Billing(resources.db)
        producers = ProducerSeries.start_if_on(settings.greptime())  # None when switched off
        if producers is not None:
            data_plane.count_producers(producers.activity)
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

    def identity(self) -> Identity:
        """The tenants' service (a dependency provider)."""
        if self._identity is None:
            raise RuntimeError("the application's lifespan has not started")
        return self._identity

    def team(self) -> TeamService:
        """The accounts and teams service (a dependency provider)."""
        if self._team is None:
            raise RuntimeError("the application's lifespan has not started")
        return self._team

    def billing(self) -> Billing:
        """The billing service (a dependency provider)."""
        if self._billing is None:
            raise RuntimeError("the application's lifespan has not started")
        return self._billing

    def dependencies(self) -> dict[str, Provide]:
        """``resources``, ``data_plane``, ``identity``, ``team`` and ``billing`` for any handler
        that names them."""
        return {
            "resources": Provide(self.resources, sync_to_thread=False),
            "data_plane": Provide(self.data_plane, sync_to_thread=False),
            "identity": Provide(self.identity, sync_to_thread=False),
            "team": Provide(self.team, sync_to_thread=False),
            "billing": Provide(self.billing, sync_to_thread=False),
        }


def resources_of(app: Litestar) -> Resources:
    """The resources opened by :meth:`Runtime.lifespan`, for middleware and lifespan hooks."""
    return cast(Resources, app.state.resources)


def identity_of(app: Litestar) -> Identity:
    """The tenants' service built by :meth:`Runtime.lifespan`, for middleware and guards."""
    return cast(Identity, app.state.identity)


def team_of(app: Litestar) -> TeamService:
    """The accounts and teams service built by :meth:`Runtime.lifespan`, for guards and
    helpers that get no dependencies."""
    return cast(TeamService, app.state.team)


def data_plane_of(app: Litestar) -> DataPlane:
    """The data plane built by :meth:`Runtime.lifespan`, for helpers that get no dependencies."""
    return cast(DataPlane, app.state.data_plane)


def billing_of(app: Litestar) -> Billing:
    """The billing service built by :meth:`Runtime.lifespan`, for helpers as above."""
    return cast(Billing, app.state.billing)
