"""Leases are timed from their commit: a pull whose transaction stalled before leasing still
hands out leases that run their full ack timeout after it commits (not already expired)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import dict_row

from data_plane.groups import service as groups
from data_plane.topics import service as topic_service
from tests.support.services import Services
from tests.support.tenancy import new_organisation, run_in_tx

ACK_TIMEOUT_MS = 1_000
STALL_S = 1.5


async def _join(url: str, environment_id: str, topic: str) -> str:
    async with await AsyncConnection.connect(url, row_factory=dict_row) as conn:
        joined = await groups.join(conn, environment_id, topic, "g", session_timeout_ms=60_000)
        await conn.commit()
        return joined.member_id


def test_a_pull_that_stalled_before_leasing_commits_leases_that_are_not_expired(
    services: Services,
) -> None:
    url = services.database_url
    org = new_organisation(url, tier="pro")
    env = org.project.environment("production")
    name = f"lease.{uuid.uuid4().hex[:8]}"
    topic = run_in_tx(
        url,
        lambda conn: topic_service.create_topic(
            conn, org.organisation.id, env.id, name, partitions=1
        ),
    )
    member = asyncio.run(_join(url, env.id, name))
    with psycopg.connect(url, row_factory=dict_row) as conn:
        group_id = conn.execute(
            "UPDATE consumer_groups SET ack_timeout_ms = %s WHERE topic_id = %s RETURNING id",
            (ACK_TIMEOUT_MS, topic.id),
        ).fetchone()["id"]
        conn.execute("UPDATE partitions SET next_offset = 3 WHERE topic_id = %s", (topic.id,))
        conn.commit()
        conn.execute("SELECT pg_sleep(%s)", (STALL_S,))  # the transaction stalls, then pulls
        pulled = conn.execute(
            "SELECT qc_pull_v2(%s, %s, %s, 10, false, ARRAY['lease-a']) AS r",
            (group_id, member, topic.id),
        ).fetchone()["r"]
        conn.commit()
        committed_at = conn.execute("SELECT clock_timestamp() AS t").fetchone()["t"]
        lease = conn.execute(
            "SELECT lease_until FROM group_leases WHERE group_id = %s", (group_id,)
        ).fetchone()
    assert pulled["leases"] == [[0, "lease-a", 0, 2]]
    left = lease["lease_until"] - committed_at
    assert left > timedelta(milliseconds=ACK_TIMEOUT_MS / 2), left  # not expired on commit
