"""Against a real GreptimeDB, when one is configured: the series tables land through the ingester.

Set ``QUEUECORE_TEST_GREPTIMEDB_GRPC`` (``host:4001``) and ``QUEUECORE_TEST_GREPTIMEDB_URL``
(``http://host:4000``, read back through ``/v1/sql``), optionally ``QUEUECORE_TEST_GREPTIMEDB_DB``
and ``QUEUECORE_TEST_GREPTIMEDB_AUTH``, as for test_greptimedb_live.py. Skipped otherwise.
"""

from __future__ import annotations

import os
import secrets
import time
from typing import Any

import pytest

from core.settings import GreptimeSettings
from observability.producers import ProducerActivity, ProducerKey
from observability.series import SeriesWriter, ingester_sender
from observability.series_rows import consumer_rows, lag_rows, usage_rows
from tests.observability.receiver import eventually
from tests.observability.test_greptimedb_live import DB, GREPTIMEDB_URL, _sql

GRPC = os.environ.get("QUEUECORE_TEST_GREPTIMEDB_GRPC", "")


@pytest.mark.skipif(
    not (GRPC and GREPTIMEDB_URL),
    reason="no GreptimeDB: set QUEUECORE_TEST_GREPTIMEDB_GRPC=host:4001 and "
    "QUEUECORE_TEST_GREPTIMEDB_URL=http://host:4000 to run",
)
def test_the_series_tables_land_in_greptimedb() -> None:
    topic = f"live-{secrets.token_hex(4)}"
    now_ms = int(time.time()) * 1000
    tenant: dict[str, Any] = {
        "organisation_id": "org_live",
        "project_id": "prj_live",
        "environment": "staging",
    }
    lag: dict[str, Any] = {
        **tenant,
        "topic": topic,
        "group": "g",
        "bucket_start_ms": now_ms,
        "partitions": 2,
    }
    lag |= {"lag": 7, "consume_rate": 1.0, "produce_rate": None, "time_to_drain_s": None}
    consumer: dict[str, Any] = {
        **tenant,
        "topic": topic,
        "group": "g",
        "member": "m",
        "client": "c",
    }
    consumer |= {"partition": 0, "committed_offset": 3, "delivered_offset": 4, "end_offset": 9}
    consumer |= {"backlog": 6, "last_activity_ms": now_ms}
    usage = {
        **tenant,
        "organisation_id": f"org_{topic}",
        "hour_ms": now_ms // 3_600_000 * 3_600_000,
    }
    usage |= dict.fromkeys(("messages_in", "bytes_in", "messages_out", "bytes_out"), 1)
    usage |= {"publish_requests": 1, "consume_requests": 0, "admin_requests": 0}
    usage |= {"storage_bytes_avg": None}
    activity = ProducerActivity()
    activity.published(ProducerKey("org_live", "prj_live", "staging", topic, "key_live", 0), 41)
    rows = [*lag_rows([lag]), *consumer_rows([consumer], now_ms), *usage_rows([usage])]
    config = GreptimeSettings.from_env(
        {"QUEUECORE_GREPTIMEDB_GRPC": GRPC, "QUEUECORE_GREPTIMEDB_DATABASE": DB}
    )
    writer = SeriesWriter(ingester_sender(config), queue_rows=100, batch_rows=100)
    for row in [*rows, *activity.take_rows()]:
        assert writer.offer(row)
    writer.close(10)
    assert writer.dropped == 0

    def landed(table: str, where: str) -> bool:
        return bool(_sql(f"SELECT * FROM {table} WHERE {where}"))

    eventually(lambda: landed("queuecore_group_lag", f"topic = '{topic}' AND lag = 7"), 30, "lag")
    eventually(lambda: landed("queuecore_consumers", f"topic = '{topic}' AND backlog = 6"), 30, "c")
    eventually(
        lambda: landed("queuecore_producers", f"topic = '{topic}' AND last_offset = 41"), 30, "p"
    )
    eventually(lambda: landed("queuecore_usage_hourly", f"organisation = 'org_{topic}'"), 30, "u")
