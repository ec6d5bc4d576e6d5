"""A member's heartbeat and its own pull, at the same moment as a rebalance, never deadlock.

A pull touches its member row and then locks the member's partitions; a heartbeat that finds a
silent member to evict locks every partition of the group. The heartbeat used to touch its
member row only after that, so the two took the same locks in opposite orders and PostgreSQL
aborted one of them (``deadlock detected``: 13 times in a 23-minute fault run).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import dict_row

from data_plane.groups import service as groups
from data_plane.topics import service as topic_service
from tests.support.pulse import pulsing
from tests.support.services import Services
from tests.support.tenancy import new_organisation, run_in_tx

RUN_S = 8.0
SILENT_SESSION_MS = 1_000  # the shortest session a group accepts


def _loop(
    url: str, step: Callable[[AsyncConnection[Any]], Awaitable[None]], stop: threading.Event
) -> list[BaseException]:
    """Run ``step`` in its own transaction again and again until ``stop``; the errors it raised."""
    errors: list[BaseException] = []

    async def run() -> None:
        async with await AsyncConnection.connect(url, row_factory=dict_row) as conn:
            while not stop.is_set():
                try:
                    await step(conn)
                    await conn.commit()
                except psycopg.Error as exc:
                    errors.append(exc)
                    await conn.rollback()

    asyncio.run(run())
    return errors


async def _group_id(conn: AsyncConnection[Any], topic_id: str) -> str:
    query = "SELECT id FROM consumer_groups WHERE topic_id = %s AND name = 'g'"
    row = await (await conn.execute(query, (topic_id,))).fetchone()
    assert row is not None
    return str(row["id"])


async def _silent_members(conn: AsyncConnection[Any], group_id: str) -> int:
    query = "SELECT count(*) AS n FROM group_members WHERE group_id = %s AND client_id = 'silent'"
    row = await (await conn.execute(query, (group_id,))).fetchone()
    assert row is not None
    return int(row["n"])


def test_heartbeats_and_pulls_of_one_member_during_evictions_never_deadlock(
    services: Services,
) -> None:
    url = services.database_url
    org = new_organisation(url, tier="pro")
    env_id = org.project.environment("production").id
    topic = run_in_tx(
        url,
        lambda conn: topic_service.create_topic(
            conn, org.organisation.id, env_id, "race.t", partitions=8
        ),
    )
    member = run_in_tx(url, lambda conn: groups.join(conn, env_id, "race.t", "g")).member_id
    group_id = run_in_tx(url, lambda conn: _group_id(conn, topic.id))

    async def pull(conn: AsyncConnection[Any]) -> None:
        # A pull's locks in a pull's order (qc_pull_state_v2, then qc_pull_v2 after the segment reads):
        # its member row, then its group's partition rows.
        await conn.execute(
            "SELECT qc_pull_state_v2(%s, %s, %s, 100, false)", (group_id, member, topic.id)
        )
        await asyncio.sleep(0.02)  # reading the blocks
        await conn.execute(
            "SELECT partition FROM group_partitions WHERE group_id = %s"
            " ORDER BY partition FOR UPDATE",
            (group_id,),
        )

    async def beat(conn: AsyncConnection[Any]) -> None:
        await groups.heartbeat(conn, env_id, "race.t", "g", member)

    joined: list[str] = []

    async def join_silent(conn: AsyncConnection[Any]) -> None:  # evicted by the next heartbeat
        joined.append("silent")
        await groups.join(
            conn, env_id, "race.t", "g", client_id="silent", session_timeout_ms=SILENT_SESSION_MS
        )
        await asyncio.sleep(0.3)

    stop = threading.Event()
    results: dict[str, list[BaseException]] = {}
    threads = [
        threading.Thread(target=lambda n=n, s=s: results.setdefault(n, _loop(url, s, stop)))
        for n, s in (("pull", pull), ("heartbeat", beat), ("join", join_silent))
    ]
    with pulsing(url):  # members are evicted only while the pulse runs
        for thread in threads:
            thread.start()
        time.sleep(RUN_S)
        stop.set()
        for thread in threads:
            thread.join(30)
    deadlocks = [e for errors in results.values() for e in errors]
    assert deadlocks == [], deadlocks[:3]
    assert set(results) == {"pull", "heartbeat", "join"}
    remaining = run_in_tx(url, lambda conn: _silent_members(conn, group_id))
    assert remaining < len(joined) - 5  # heartbeats did evict (and so lock every partition)
