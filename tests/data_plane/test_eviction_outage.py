"""A PostgreSQL outage or stall longer than the session timeout does not evict every consumer at
once: members could not heartbeat meanwhile, so their silence counts from its end (a restart, or
the end of a gap in the API's pulse). Against a dedicated embedded PostgreSQL, really stopped and
started again, or frozen (SIGSTOP) and thawed, while a pulse runs as an API replica's would.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from psycopg import AsyncConnection
from psycopg.rows import dict_row

from data_plane.groups import pulse
from data_plane.groups import service as groups
from data_plane.topics import service as topic_service
from infra.embedded import EmbeddedPostgres
from tests.faults.cluster import signal_tree
from tests.support.pulse import pulsing
from tests.support.services import Services, dedicated_postgres
from tests.support.tenancy import new_organisation, run_in_tx

SESSION_MS = 1_000
STALL_S = SESSION_MS / 1000 + pulse.PULSE_GAP_S + 1.0  # past the session and a pulse gap


@dataclass
class Stack:
    """The dedicated PostgreSQL and its environment with topic ``t.outage``."""

    postgres: EmbeddedPostgres
    environment_id: str

    @property
    def url(self) -> str:
        """Where the dedicated PostgreSQL listens."""
        return self.postgres.url


@pytest.fixture
def stack(services: Services, tmp_path: Path) -> Iterator[Stack]:
    with dedicated_postgres(tmp_path) as postgres:
        org = new_organisation(postgres.url, tier="pro")
        env = org.project.environment("production")
        run_in_tx(
            postgres.url,
            lambda conn: topic_service.create_topic(
                conn, org.organisation.id, env.id, "t.outage", partitions=2
            ),
        )
        with pulsing(postgres.url):  # as with any replica up
            yield Stack(postgres, env.id)


async def _join_two(url: str, environment_id: str) -> list[str]:
    async with await AsyncConnection.connect(url, row_factory=dict_row) as conn:
        members = []
        for client in ("a", "b"):
            joined = await groups.join(
                conn,
                environment_id,
                "t.outage",
                "g",
                client_id=client,
                session_timeout_ms=SESSION_MS,
            )
            await conn.commit()
            members.append(joined.member_id)
        return members


async def _sweep(url: str) -> int:
    async with await AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as conn:
        return (await groups.sweep_groups(conn)).members_evicted


async def _heartbeat(url: str, environment_id: str, member_id: str) -> None:
    async with await AsyncConnection.connect(url, row_factory=dict_row) as conn:
        await groups.heartbeat(conn, environment_id, "t.outage", "g", member_id)
        await conn.commit()


async def _members(url: str) -> set[str]:
    async with await AsyncConnection.connect(url, row_factory=dict_row) as conn:
        rows = await (await conn.execute("SELECT id FROM group_members")).fetchall()
        return {str(row["id"]) for row in rows}


def test_members_silent_only_while_postgres_was_down_keep_their_session(stack: Stack) -> None:
    assert len(asyncio.run(_join_two(stack.url, stack.environment_id))) == 2

    stack.postgres.stop()  # an outage longer than the members' session
    time.sleep(SESSION_MS / 1000 + 1.0)
    stack.postgres.start()

    assert asyncio.run(_sweep(stack.url)) == 0  # nobody evicted for the database's silence
    time.sleep(pulse.PULSE_S + SESSION_MS / 1000 + 0.5)  # a pulse, then a whole session
    assert asyncio.run(_sweep(stack.url)) == 2  # silence after the restart still counts


def test_members_silent_only_while_postgres_was_frozen_keep_their_session(stack: Stack) -> None:
    """A stall, not a restart: PostgreSQL's start time says nothing; the pulse's gap does."""
    a, b = asyncio.run(_join_two(stack.url, stack.environment_id))
    assert stack.postgres.process is not None

    signal_tree(stack.postgres.process, signal.SIGSTOP)
    time.sleep(STALL_S)
    signal_tree(stack.postgres.process, signal.SIGCONT)

    # The first to reach the thawed database: a's heartbeat (which rebalances lazily) and the
    # sweep, before any pulse landed. Neither may evict b for the stall.
    asyncio.run(_heartbeat(stack.url, stack.environment_id, a))
    assert asyncio.run(_sweep(stack.url)) == 0
    assert asyncio.run(_members(stack.url)) == {a, b}
    # Silence after the stall still counts: once pulses land again, b's session runs out.
    deadline = time.monotonic() + pulse.PULSE_S + SESSION_MS / 1000 + 0.5
    while time.monotonic() < deadline:  # a keeps its session, b stays silent
        asyncio.run(_heartbeat(stack.url, stack.environment_id, a))
        time.sleep(SESSION_MS / 1000 / 4)
    asyncio.run(_heartbeat(stack.url, stack.environment_id, a))  # evicts b, lazily
    assert asyncio.run(_members(stack.url)) == {a}


def test_a_member_silent_while_the_pulse_runs_is_evicted(stack: Stack) -> None:
    """The pulse spares only stalls: a consumer that just went quiet is evicted as before."""
    asyncio.run(_join_two(stack.url, stack.environment_id))
    time.sleep(SESSION_MS / 1000 + 0.5)
    assert asyncio.run(_sweep(stack.url)) == 2
