"""A PostgreSQL outage longer than the session timeout does not evict every consumer at once:
members could not heartbeat while the database was down, so their silence counts from its
restart. Against a dedicated embedded PostgreSQL, really stopped and started again.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from data_plane.groups import service as groups
from data_plane.topics import service as topic_service
from infra import migrate
from infra.embedded import EmbeddedPostgres, free_port_block
from tests.support.services import Services, unavailable
from tests.support.tenancy import new_organisation, run_in_tx

SESSION_MS = 1_000


async def _join_two(url: str, environment_id: str, topic: str) -> list[str]:
    async with await AsyncConnection.connect(url, row_factory=dict_row) as conn:
        members = []
        for client in ("a", "b"):
            joined = await groups.join(
                conn, environment_id, topic, "g", client_id=client, session_timeout_ms=SESSION_MS
            )
            await conn.commit()
            members.append(joined.member_id)
        return members


async def _sweep(url: str) -> int:
    async with await AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as conn:
        return (await groups.sweep_groups(conn)).members_evicted


def test_members_silent_only_while_postgres_was_down_keep_their_session(
    services: Services, tmp_path: Path
) -> None:
    postgres = EmbeddedPostgres(tmp_path / "postgres", tmp_path / "logs", free_port_block())
    try:
        postgres.start()
        migrate.apply(postgres.url)
    except Exception as exc:
        postgres.stop()
        unavailable(f"a dedicated PostgreSQL: {exc}")
    try:
        url = postgres.url
        org = new_organisation(url, tier="pro")
        env = org.project.environment("production")
        run_in_tx(
            url,
            lambda conn: topic_service.create_topic(
                conn, org.organisation.id, env.id, "t.outage", partitions=2
            ),
        )
        assert len(asyncio.run(_join_two(url, env.id, "t.outage"))) == 2

        postgres.stop()  # an outage longer than the members' session
        time.sleep(SESSION_MS / 1000 + 1.0)
        postgres.start()

        assert asyncio.run(_sweep(url)) == 0  # nobody evicted for the database's silence
        time.sleep(SESSION_MS / 1000 + 0.5)
        assert asyncio.run(_sweep(url)) == 2  # silence after the restart still counts
    finally:
        postgres.stop()
