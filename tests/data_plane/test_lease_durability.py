"""A delivery's attempt number never goes backwards: a pull's leases survive a PostgreSQL crash
(docs/decisions.md §11), so what a member received before the crash comes back after its ack
timeout as attempt 2, never again as attempt 1, on at-least-once topics as on exactly-once ones.

Against a dedicated PostgreSQL killed with SIGKILL (every process: a crash) right after the
pull, and restarted on the same data. Its WAL writer is set to wake every 10 s, so a commit
that did not wait for its own WAL flush is lost by the crash every time, not by chance.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import psycopg
import pytest

from core import settings
from core.db import Conn, async_pool
from core.settings import DataPlaneSettings
from data_plane.groups import service as groups
from data_plane.service import DataPlane, Scope
from data_plane.topics import service as topic_service
from infra.embedded import EmbeddedPostgres
from observability.object_store import metered_store
from tests.data_plane.test_writer import entries
from tests.faults.cluster import signal_tree
from tests.support.services import Services, dedicated_postgres
from tests.support.tenancy import new_organisation, run_in_tx

ACK_TIMEOUT_MS = 1_000


@pytest.fixture
def postgres(services: Services, tmp_path: Path) -> Iterator[EmbeddedPostgres]:
    with dedicated_postgres(tmp_path) as server:
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET wal_writer_delay = '10s'")
            conn.execute("SELECT pg_reload_conf()")
        yield server


def crash(postgres: EmbeddedPostgres) -> None:
    """SIGKILL to the postmaster and every backend, then a restart (recovery from the WAL)."""
    assert postgres.process is not None
    signal_tree(postgres.process, signal.SIGKILL)
    postgres.process.wait(10)
    postgres.start()


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_what_a_member_received_before_a_crash_comes_back_as_a_later_attempt(
    postgres: EmbeddedPostgres, delivery: str
) -> None:
    org = new_organisation(postgres.url, tier="pro")
    env = org.project.environment("production").id
    config = groups.GroupConfig(start_from="earliest", ack_timeout_ms=ACK_TIMEOUT_MS)

    async def setup(conn: Conn) -> str:
        await topic_service.create_topic(
            conn, org.organisation.id, env, "t.crash", partitions=1, delivery=delivery
        )
        await groups.configure(conn, env, "t.crash", "g", config)
        return (await groups.join(conn, env, "t.crash", "g", client_id="c")).member_id

    member = run_in_tx(postgres.url, setup)
    caller = Scope(org.organisation.id, env)

    async def before_the_crash() -> list[tuple[int, int]]:
        async with data_plane(postgres.url) as plane:
            try:
                route = await plane.publisher.topics.get(org.organisation.id, env, "t.crash")
                await plane.writer.write(route.target, entries(5, 0, "crash"))
                pulled = await plane.pull(caller, "t.crash", "g", member, 5)
                return [(d.offset, d.attempt) for d in pulled.deliveries]
            finally:
                crash(postgres)  # before anything else commits and flushes the WAL

    async def after_the_crash() -> list[tuple[int, int]]:
        async with data_plane(postgres.url) as plane:
            received: list[tuple[int, int]] = []
            for _ in range(20):  # the leases expire after the ack timeout
                pulled = await plane.pull(caller, "t.crash", "g", member, 5)
                received += [(d.offset, d.attempt) for d in pulled.deliveries]
                if len(received) >= 5:
                    break
                await asyncio.sleep(ACK_TIMEOUT_MS / 1000 / 4)
            return received

    first = asyncio.run(before_the_crash())
    assert first == [(offset, 1) for offset in range(5)]
    again = asyncio.run(after_the_crash())
    assert sorted(offset for offset, _ in again) == list(range(5))
    assert all(attempt >= 2 for _, attempt in again), again  # never attempt 1 a second time


@asynccontextmanager
async def data_plane(url: str) -> AsyncIterator[DataPlane]:
    """A running data plane on ``url``, as an API process has one."""
    pool = async_pool(dataclasses.replace(settings.database(), url=url), "test-leases")
    await pool.open(wait=True)
    config = dataclasses.replace(DataPlaneSettings.from_env(), database_url=url)
    plane = DataPlane(pool, metered_store(settings.object_store()), config)
    await plane.start()
    try:
        yield plane
    finally:
        await plane.close()
        await pool.close()
