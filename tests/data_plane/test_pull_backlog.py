"""A pull's cost does not grow with the backlog: it reads only the index entries of the blocks it
can deliver, however many blocks the member's partitions hold beyond them."""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable

from litestar.testing import TestClient
from psycopg import Connection
from psycopg.rows import DictRow

from core.db import connect
from tests.data_plane.stored import seed_topic
from tests.support.services import Services
from tests.support.tenancy import bearer

BACKLOG_BLOCKS = 3000
PULL_LIMIT = 10


def _backlog(database_url: str, topic_id: str) -> None:
    """``BACKLOG_BLOCKS`` one-message blocks on partition 0 (index rows only: never read)."""
    key = f"segments/backlog/{secrets.token_hex(8)}.seg"
    with connect(database_url) as conn, conn.transaction():
        conn.execute(
            "INSERT INTO segment_objects (object_key, size_bytes, block_count) VALUES (%s, 1, %s)",
            (key, BACKLOG_BLOCKS),
        )
        conn.execute(
            "INSERT INTO segment_blocks (topic_id, partition, base_offset, count, object_key,"
            " byte_offset, byte_length, min_timestamp_ms, max_timestamp_ms)"
            " SELECT %s, 0, o, 1, %s, 0, 1, 0, 0 FROM generate_series(0, %s - 1) AS o",
            (topic_id, key, BACKLOG_BLOCKS),
        )
        conn.execute(
            "UPDATE partitions SET next_offset = %s WHERE topic_id = %s AND partition = 0",
            (BACKLOG_BLOCKS, topic_id),
        )


def _blocks_plan(conn: Connection[DictRow], group_id: str, member_id: str, topic_id: str) -> str:
    """The executed plan of the pull's block lookup, from auto_explain, with a generic plan
    (what a connection ends up with after a few pulls)."""
    notices: list[str] = []
    conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
    for setting in (
        "auto_explain.log_min_duration = 0",
        "auto_explain.log_nested_statements = on",
        "auto_explain.log_analyze = on",
        "auto_explain.log_buffers = on",
        "auto_explain.log_level = notice",
        "plan_cache_mode = force_generic_plan",
    ):
        conn.execute(f"SET {setting}")
    conn.execute(
        "SELECT qc_pull_state_v2(%s, %s, %s, %s, false)",
        (group_id, member_id, topic_id, PULL_LIMIT),
    )
    conn.rollback()
    (plan,) = [n for n in notices if "FROM segment_blocks sb" in n]
    return plan


def test_a_pull_far_behind_reads_only_the_blocks_it_can_deliver(
    services: Services, client: TestClient, unique: Callable[[str], str]
) -> None:
    url = services.database_url
    topic = seed_topic(url, unique("backlog"), partitions=1)
    _backlog(url, topic.id)
    headers = bearer(topic.secret)
    base = f"/v1/topics/{topic.name}/groups/workers"
    assert client.put(base, json={"startFrom": "earliest"}, headers=headers).status_code == 200
    joined = client.post(f"{base}/members", json={}, headers=headers)
    assert joined.status_code == 201, joined.text
    member_id = joined.json()["memberId"]

    with connect(url) as conn:
        group = conn.execute(
            "SELECT id FROM consumer_groups WHERE topic_id = %s", (topic.id,)
        ).fetchone()
        assert group is not None
        conn.execute("LOAD 'auto_explain'")
        plan = _blocks_plan(conn, group["id"], member_id, topic.id)

    # The 10 blocks it can deliver, found by one index range scan per partition: a handful of
    # pages, not the 3,000 index entries of the whole backlog.
    scan = re.search(r"Index Scan using segment_blocks_pkey on segment_blocks sb.*", plan)
    assert scan is not None, plan
    assert re.search(r"rows=10\.00 loops=1", scan.group(0)), plan
    hits = [int(n) for n in re.findall(r"Buffers: shared hit=(\d+)", plan)]
    assert hits and hits[0] < 30, plan
