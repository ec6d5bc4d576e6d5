"""The GreptimeDB series on the wire: what ``greptimedb-ingester`` sends, decoded by a local
receiver of GreptimeDB's gRPC protocol (tests/observability/greptime_receiver.py).

With ``QUEUECORE_GREPTIMEDB_GRPC`` pointing at the receiver, a real ``queuecore serve`` sends
``queuecore_producers``; the beat task (run directly) sends ``queuecore_consumers`` and
``queuecore_usage_hourly``; the lag analytics task (the real Spark job in a child process) sends
``queuecore_group_lag``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient

from core import settings
from core.settings import GreptimeSettings
from observability import series
from observability.producers import ProducerActivity, ProducerKey
from observability.series import SeriesWriter, ingester_sender
from observability.series_rows import consumer_rows, lag_rows, usage_rows
from tests.data_plane.test_consume_api import Group
from tests.observability.conftest import serve
from tests.observability.greptime_receiver import GreptimeReceiver, ReceivedRow
from tests.observability.receiver import eventually
from tests.support import lag as lag_support
from tests.support.services import Services, unavailable
from tests.support.tenancy import new_organisation

# QUEUECORE_TEST_SERIES_SPARK=1: the lag test runs the real Spark job instead of seeding its output.
RUN_SPARK = os.environ.get("QUEUECORE_TEST_SERIES_SPARK", "") == "1"
TENANT = {"organisation_id": "org_1", "project_id": "prj_1", "environment": "production"}
TENANT_TAGS = {"organisation": "org_1", "project": "prj_1", "environment": "production"}


@pytest.fixture
def receiver() -> Iterator[GreptimeReceiver]:
    """A GreptimeDB gRPC receiver on 127.0.0.1."""
    started = GreptimeReceiver()
    try:
        yield started
    finally:
        series.close_writer()
        started.stop()
        settings.clear_caches()  # after monkeypatch restored the environment (set up later)


def _wait_rows(receiver: GreptimeReceiver, table: str, count: int) -> list[ReceivedRow]:
    eventually(lambda: len(receiver.table(table)) >= count, 20, f"{count} rows of {table}")
    return receiver.table(table)


def test_each_table_arrives_with_its_tags_fields_and_timestamp(
    receiver: GreptimeReceiver,
) -> None:
    config = GreptimeSettings.from_env(
        {"QUEUECORE_GREPTIMEDB_GRPC": receiver.address, "QUEUECORE_GREPTIMEDB_DATABASE": "ops"}
    )
    writer = SeriesWriter(ingester_sender(config), queue_rows=100, batch_rows=100)
    lag: dict[str, Any] = {
        **TENANT,
        "topic": "orders",
        "group": "billing",
        "bucket_start_ms": 1_800_000_000_000,
    }
    lag |= {"partitions": 3, "lag": 42, "consume_rate": 1.5, "produce_rate": None}
    lag |= {"time_to_drain_s": None}
    usage: dict[str, Any] = {
        **TENANT,
        "hour_ms": 1_799_996_400_000,
        "messages_in": 7,
        "bytes_in": 70,
    }
    usage |= {"messages_out": 5, "bytes_out": 50, "publish_requests": 4}
    usage |= {"consume_requests": 2, "admin_requests": 1, "storage_bytes_avg": None}
    consumer: dict[str, Any] = {**TENANT, "topic": "orders", "group": "billing", "member": "mem_1"}
    consumer |= {"client": "worker-a", "partition": 2, "committed_offset": 10}
    consumer |= {"delivered_offset": 12, "end_offset": 15, "backlog": 5}
    consumer |= {"last_activity_ms": 1_800_000_001_000}
    activity = ProducerActivity(clock_ms=lambda: 1_800_000_002_000)
    key = ProducerKey("org_1", "prj_1", "production", "orders", "key_1", 0)
    activity.published(key, 8)
    activity.published(key, 9)
    rows = [*lag_rows([lag]), *usage_rows([usage]), *consumer_rows([consumer], 1_800_000_060_000)]
    for row in [*rows, *activity.take_rows()]:
        assert writer.offer(row)
    _wait_rows(receiver, "queuecore_producers", 1)
    writer.close()

    [got_lag] = receiver.table("queuecore_group_lag")
    assert got_lag.database == "ops"
    assert got_lag.values == {
        **TENANT_TAGS,
        "topic": "orders",
        "group": "billing",
        "partitions": 3.0,
        "lag": 42.0,
        "consume_rate": 1.5,
        "produce_rate": None,  # unknown stays NULL, never 0
        "time_to_drain_s": None,
        "ts": 1_800_000_000_000,
    }
    assert got_lag.semantics["group"] == "TAG"
    assert got_lag.semantics["lag"] == "FIELD"
    assert got_lag.semantics["ts"] == "TIMESTAMP"
    [got_usage] = receiver.table("queuecore_usage_hourly")
    assert got_usage.values["messages_in"] == 7.0
    assert got_usage.values["ts"] == 1_799_996_400_000
    [got_consumer] = receiver.table("queuecore_consumers")
    assert {k: got_consumer.values[k] for k in ("member", "client", "partition", "backlog")} == {
        "member": "mem_1",
        "client": "worker-a",
        "partition": "2",
        "backlog": 5.0,
    }
    [got_producer] = receiver.table("queuecore_producers")
    assert got_producer.values == {
        **TENANT_TAGS,
        "topic": "orders",
        "producer": "key_1",
        "partition": "0",
        "last_offset": 9.0,
        "messages": 2.0,
        "last_activity_ms": 1_800_000_002_000.0,
        "ts": 1_800_000_002_000,
    }


@pytest.mark.e2e
def test_traffic_fills_the_producer_consumer_usage_and_lag_tables(
    services: Services,
    receiver: GreptimeReceiver,
    unique: Callable[[str], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    switch = {"QUEUECORE_GREPTIMEDB_GRPC": receiver.address, "QUEUECORE_GREPTIMEDB_SNAPSHOT_S": "1"}
    org = new_organisation(services.database_url)
    key = org.keys["production"]
    tags = {
        "organisation": org.organisation.id,
        "project": org.project.id,
        "environment": "production",
    }
    topic = unique("series")
    with serve(services, tmp_path / "serve.log", switch) as server:
        client = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {key.secret}"}, timeout=30
        )
        assert client.post("/v1/topics", json={"name": topic, "partitions": 1}).status_code == 201
        offsets = [
            client.post(f"/v1/topics/{topic}/messages", json={"data": n}).json()["offset"]
            for n in range(3)
        ]
        batch = {"messages": [{"data": n} for n in range(2)]}
        posted = client.post(f"/v1/topics/{topic}/messages/batch", json=batch)
        offsets += [result["offset"] for result in posted.json()["results"]]
        group = f"/v1/topics/{topic}/groups/billing"
        assert client.put(group, json={"startFrom": "earliest"}).status_code == 200
        joined = client.post(f"{group}/members", json={"clientId": "worker-a"}).json()
        pulled = client.post(f"{group}/members/{joined['memberId']}/pull", json={"maxMessages": 2})
        ack_ids = [m["ackId"] for m in pulled.json()["messages"]]
        assert client.post(f"{group}/ack", json={"ackIds": ack_ids}).status_code == 200

        # Producer rows every second from the API process, off the request path.
        _wait_rows(receiver, "queuecore_producers", 1)
        assert server.stop() in (0, -signal.SIGTERM)  # and the last ones at shutdown
    mine = [row for row in receiver.table("queuecore_producers") if row.values["topic"] == topic]
    assert {row.values["producer"] for row in mine} == {key.key.id}
    assert all(row.values[tag] == value for row in mine for tag, value in tags.items())
    assert sum(row.values["messages"] for row in mine) == 5
    assert max(row.values["last_offset"] for row in mine) == max(offsets)
    assert key.secret not in str(receiver.rows)

    _switch_on(monkeypatch, services, switch)
    from observability.tasks import snapshot_series

    report = snapshot_series()
    assert report["consumerRows"] >= 1
    consumers = _wait_rows(receiver, "queuecore_consumers", 1)
    [consumer] = [row for row in consumers if row.values["topic"] == topic]
    assert consumer.values["group"] == "billing"
    assert consumer.values["member"] == joined["memberId"]
    assert consumer.values["client"] == "worker-a"
    assert consumer.values["committed_offset"] == 2.0  # two pulled and acked
    assert consumer.values["end_offset"] == 5.0
    assert consumer.values["backlog"] == 3.0
    assert all(consumer.values[tag] == value for tag, value in tags.items())
    usage = _wait_rows(receiver, "queuecore_usage_hourly", 1)
    [hour] = [row for row in usage if row.values["organisation"] == org.organisation.id]
    assert hour.values["environment"] == "production"
    assert hour.values["messages_in"] == 5.0
    assert hour.values["messages_out"] == 2.0
    assert hour.values["ts"] % 3_600_000 == 0


def _switch_on(monkeypatch: pytest.MonkeyPatch, services: Services, switch: dict[str, str]) -> None:
    """This test process as a worker with the switch on (the beat task runs here)."""
    for name, value in {**services.env(), **switch}.items():
        monkeypatch.setenv(name, value)
    settings.clear_caches()


def test_the_lag_task_sends_the_lag_series(
    services: Services,
    client: TestClient,
    receiver: GreptimeReceiver,
    unique: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    org = new_organisation(services.database_url)
    group = Group(client, org, unique)
    ids = lag_support.group_ids(services.database_url, group.topic)
    t0 = lag_support.minute(-140)
    until = t0 + timedelta(minutes=3)
    _switch_on(monkeypatch, services, {"QUEUECORE_GREPTIMEDB_GRPC": receiver.address})
    if RUN_SPARK:
        # The task as the worker runs it: the job in a child process, then the rows, sent by
        # the task (~1 min on a busy 2-core machine: opt-in).
        if importlib.util.find_spec("pyspark") is None or shutil.which("java") is None:
            unavailable("the lag analytics job needs PySpark and Java")
        snapshots = [(0, t0 + timedelta(minutes=m), 30 * m, 10 + 60 * m) for m in range(3)]
        lag_support.insert_snapshots(services.database_url, ids, snapshots)
        from spark_pipelines.tasks import run_lag_analytics

        report = run_lag_analytics(since=t0.isoformat(), until=until.isoformat())
        assert report["points"] == 3
    else:
        # What the job writes for those snapshots (tests/spark_pipelines checks the job itself);
        # the task's hook reads it back and sends it.
        points = [(0, 10, (None, None, None)), (1, 40, (0.5, 1.0, None)), (2, 70, (0.5, 1.0, None))]
        for m, lag, rates in points:
            at = t0 + timedelta(minutes=m)
            lag_support.insert_point(services.database_url, ids, at, lag, rates)
        from spark_pipelines.tasks import send_lag_series

        report = send_lag_series(t0, until)
    assert report["seriesRowsQueued"] == 3
    rows = _wait_rows(receiver, "queuecore_group_lag", 3)
    mine = sorted(
        (r for r in rows if r.values["topic"] == group.topic), key=lambda r: r.values["ts"]
    )
    assert [r.values["ts"] for r in mine] == [
        int((t0 + timedelta(minutes=m)).timestamp() * 1000) for m in range(3)
    ]
    assert mine[-1].values == {
        "organisation": org.organisation.id,
        "project": org.project.id,
        "environment": "production",
        "topic": group.topic,
        "group": "workers",
        "partitions": 1.0,
        "lag": 70.0,
        "consume_rate": 0.5,
        "produce_rate": 1.0,
        "time_to_drain_s": None,  # not draining: produced faster than consumed
        "ts": int((t0 + timedelta(minutes=2)).timestamp() * 1000),
    }


def test_switched_off_the_beat_task_reads_nothing_and_sends_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("QUEUECORE_GREPTIMEDB_GRPC", raising=False)
    monkeypatch.setenv("QUEUECORE_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    settings.clear_caches()
    from observability.tasks import snapshot_series

    # No database connection is tried (the URL above would refuse it), no writer exists.
    assert snapshot_series() == {"skipped": "QUEUECORE_GREPTIMEDB_GRPC is not set"}
    assert series.writer(settings.greptime()) is None
    settings.clear_caches()
