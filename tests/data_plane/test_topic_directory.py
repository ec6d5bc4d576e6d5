"""The publish path's route cache against a real PostgreSQL whose ``topics`` table another
session holds locked, so a route load cannot finish: a route in its second half is reloaded in
the background while publishes go on using it, an expired route is waited for (never used past
its time), and a topic found deleted by a background reload is refused at once."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import psycopg
import pytest
from psycopg.rows import dict_row

from core.db import async_pool
from core.settings import DatabaseSettings
from data_plane.errors import TopicNotFound
from data_plane.topics import service as topic_service
from data_plane.write.publish import TopicDirectory, TopicRoute
from tenants.models import NewOrganisation
from tests.support.services import Services
from tests.support.tenancy import new_organisation

TTL_S = 2.0


async def _topic(url: str, org: NewOrganisation) -> tuple[str, str, str]:
    environment_id = org.project.environment("production").id
    async with await psycopg.AsyncConnection.connect(url, row_factory=dict_row) as conn:
        topic = await topic_service.create_topic(
            conn, org.organisation.id, environment_id, "routes"
        )
        await conn.commit()
    return org.organisation.id, environment_id, topic.name


@pytest.fixture
def database(services: Services) -> tuple[str, NewOrganisation]:
    """The test database's URL and a fresh organisation in it."""
    return services.database_url, new_organisation(services.database_url, tier="pro")


@dataclass
class _Routes:
    """A fresh topic and a directory over its own pool."""

    directory: TopicDirectory
    organisation_id: str
    environment_id: str
    name: str

    async def get(self) -> TopicRoute:
        return await self.directory.get(self.organisation_id, self.environment_id, self.name)


@contextlib.asynccontextmanager
async def _routes(url: str, org: NewOrganisation) -> AsyncIterator[_Routes]:
    organisation_id, environment_id, name = await _topic(url, org)
    pool = async_pool(DatabaseSettings(url=url, pool_min=1, pool_max=4), "test-routes")
    await pool.open()
    try:
        yield _Routes(TopicDirectory(pool, ttl_s=TTL_S), organisation_id, environment_id, name)
    finally:
        await pool.close()


class _TopicsLocked:
    """Another session holding ``topics`` in ACCESS EXCLUSIVE mode: reads of it wait."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn: psycopg.AsyncConnection[tuple[object, ...]] | None = None

    async def __aenter__(self) -> _TopicsLocked:
        self.conn = await psycopg.AsyncConnection.connect(self.url)
        await self.conn.execute("LOCK TABLE topics IN ACCESS EXCLUSIVE MODE")
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.conn is not None
        await self.conn.rollback()
        await self.conn.close()


def test_a_route_is_reloaded_in_the_background_and_never_used_past_its_time(
    database: tuple[str, NewOrganisation],
) -> None:
    url, org = database

    async def scenario() -> None:
        async with _routes(url, org) as routes:
            loaded_at = time.monotonic()
            route = await routes.get()
            await asyncio.sleep(TTL_S * 0.6)
            # second half of its time: answered from the cache, reloaded in the background
            reloaded_at = time.monotonic()
            assert await routes.get() is route
            async with asyncio.timeout(TTL_S * 0.3):  # the reload lands before the route expires
                while await routes.get() is route:
                    await asyncio.sleep(0.02)
            async with _TopicsLocked(url):
                await asyncio.sleep(max(0.0, loaded_at + TTL_S + 0.05 - time.monotonic()))
                # past the first load's time, with the table locked: the reloaded route, at once
                async with asyncio.timeout(0.2):
                    fresh = await routes.get()
                assert fresh is not route and fresh.target.id == route.target.id
                await asyncio.sleep(max(0.0, reloaded_at + TTL_S + 0.05 - time.monotonic()))
                # that one expired too while its own reload waits for the lock: waited for
                waiting = asyncio.ensure_future(routes.get())
                await asyncio.sleep(0.3)
                assert not waiting.done()
            assert (await asyncio.wait_for(waiting, 5)).target.id == route.target.id

    asyncio.run(scenario())


def test_a_topic_deleted_meanwhile_is_refused_once_a_background_reload_finds_it_gone(
    database: tuple[str, NewOrganisation],
) -> None:
    url, org = database

    async def scenario() -> None:
        async with _routes(url, org) as routes:
            loaded_at = time.monotonic()
            await routes.get()
            async with await psycopg.AsyncConnection.connect(url, row_factory=dict_row) as conn:
                await topic_service.delete_topic(conn, routes.environment_id, routes.name)
                await conn.commit()
            await asyncio.sleep(max(0.0, loaded_at + TTL_S * 0.6 - time.monotonic()))
            await routes.get()  # cached; reload starts
            with pytest.raises(TopicNotFound):
                # before the cached route expires
                async with asyncio.timeout(loaded_at + TTL_S - time.monotonic() - 0.05):
                    while True:
                        await routes.get()
                        await asyncio.sleep(0.02)

    asyncio.run(scenario())
