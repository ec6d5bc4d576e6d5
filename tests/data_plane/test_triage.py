"""Latency triage against the real PostgreSQL and S3: a slow S3 PUT makes a slow publish, and
the record says the PUT is where its time went; fast publishes and the per-second bound."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import phases
from core import settings
from core.db import async_pool
from core.object_store import S3ObjectStore
from core.settings import GreptimeSettings, TriageSettings, WriterSettings
from data_plane.topics import service as topic_service
from data_plane.write.segment import Message
from data_plane.write.timing import FlushClock, PhaseTimings, percentile_us
from data_plane.write.triage import TABLE, SlowPublishTriage
from data_plane.write.writer import Entry, SegmentWriter, TopicTarget
from observability.series import Row, SeriesWriter
from tests.data_plane.test_writer import SlowPuts
from tests.support.services import Services
from tests.support.tenancy import new_organisation, run_in_tx

AT_ONCE = WriterSettings(linger_ms=0, standard_linger_ms=150, max_segment_bytes=8 << 20)
PUT_DELAY_S = 0.4


def test_triage_settings_are_off_by_default_and_validated() -> None:
    assert TriageSettings.from_env({}).slow_ms == 0
    assert (
        SlowPublishTriage.from_settings(TriageSettings.from_env({}), GreptimeSettings(None)) is None
    )
    on = TriageSettings.from_env({"QUEUECORE_TRIAGE_SLOW_MS": "50"})
    assert (on.slow_ms, on.max_per_s) == (50, 10)
    for bad in ({"QUEUECORE_TRIAGE_SLOW_MS": "-1"}, {"QUEUECORE_TRIAGE_MAX_PER_S": "0"}):
        try:
            TriageSettings.from_env(bad)
        except settings.SettingsError as error:
            assert error.variable == next(iter(bad))
        else:
            raise AssertionError(f"{bad} was accepted")


class Received:
    """The rows the series writer sent (what GreptimeDB would have received)."""

    def __init__(self) -> None:
        self.rows: list[Row] = []

    def __call__(self, table: str, rows: Sequence[Row]) -> None:
        self.rows.extend(rows)


def new_target(database_url: str) -> TopicTarget:
    org = new_organisation(database_url, tier="pro")
    env = org.project.environment("production")
    topic = run_in_tx(
        database_url,
        lambda conn: topic_service.create_topic(
            conn, org.organisation.id, env.id, f"t.{uuid.uuid4().hex[:10]}", partitions=2
        ),
    )
    return TopicTarget(
        topic.id,
        topic.name,
        topic.latency_class,
        topic.retention_s,
        org.organisation.id,
        org.project.id,
        env.id,
    )


def one(partition: int, tag: str) -> list[Entry]:
    return [Entry(partition, Message(None, {}, f'"{tag}"'.encode(), 0))]


def run_writer(triage: SlowPublishTriage | None, work: Any, timings_log_s: float = 0.0) -> Any:
    """``work(writer)`` on a started writer over a real pool and bucket, then close it."""

    async def run() -> Any:
        pool = async_pool(settings.database(), "test-triage")
        await pool.open(wait=True)
        objects = S3ObjectStore.from_settings(settings.object_store())
        writer = SegmentWriter(pool, objects, AT_ONCE, triage=triage, timings_log_s=timings_log_s)
        await writer.start()
        try:
            return await work(writer)
        finally:
            await writer.close()
            await pool.close()

    return asyncio.run(run())


def test_a_slow_put_is_recorded_as_the_cause_of_a_slow_publish(
    services: Services, json_logs: io.StringIO
) -> None:
    target = new_target(services.database_url)
    received = Received()
    rows = SeriesWriter(received, queue_rows=100, batch_rows=10)
    triage = SlowPublishTriage(slow_ms=200, max_per_s=10, rows=rows)

    async def work(writer: SegmentWriter) -> None:
        await writer.write(target, one(0, "fast"))  # a real PUT and commit: well under 200 ms
        writer.objects = SlowPuts(writer.objects, delay_s=PUT_DELAY_S)
        await writer.write(target, one(1, "slow"))

    run_writer(triage, work)
    rows.close()
    assert triage.recorded == 1  # the fast publish was not recorded
    [row] = received.rows
    assert row.table == TABLE
    assert row.tags == {
        "organisation": target.organisation_id,
        "project": target.project_id,
        "environment": target.environment_id,
        "topic": target.name,
        "partition": "1",
        "class": "express",
        "cause": "put",
    }
    assert row.fields["put_ms"] >= PUT_DELAY_S * 1000
    assert row.fields["total_ms"] >= row.fields["put_ms"]
    assert row.fields["commit_ms"] < row.fields["put_ms"]
    [line] = [json.loads(m) for m in json_logs.getvalue().splitlines() if "slow_publish" in m]
    assert (line["event"], line["cause"], line["topic"]) == ("slow_publish", "put", target.name)


def test_records_are_bounded_per_second_and_the_rest_counted(
    services: Services, json_logs: io.StringIO
) -> None:
    target = new_target(services.database_url)
    triage = SlowPublishTriage(slow_ms=100, max_per_s=2, rows=None)  # series off: the log only

    async def work(writer: SegmentWriter) -> list[float]:
        writer.objects = SlowPuts(writer.objects, delay_s=0.2)
        await asyncio.gather(*(writer.write(target, one(0, f"m{i}")) for i in range(5)))
        return [writer.timings.flushes, writer.timings.messages]

    flushes, messages = run_writer(triage, work)
    assert (triage.recorded, triage.suppressed) == (2, 3)
    assert len([m for m in json_logs.getvalue().splitlines() if "slow_publish" in m]) == 2
    assert messages == 5 and flushes >= 1


def test_phase_timings_show_where_a_slow_put_went() -> None:
    timings = PhaseTimings()
    clock = FlushClock(queued_s=10.0, started_s=10.001)
    clock.put_done_s, clock.committed_s, clock.answered_s = 10.5, 10.502, 10.5021
    timings.flushed(clock, messages=3)
    counts = timings.histograms
    put_ms = (percentile_us(counts["put"], 50) or 0) / 1000
    commit_ms = (percentile_us(counts["commit"], 50) or 0) / 1000
    assert 499 <= put_ms <= 499 * 1.1  # within one ~9 % bucket
    assert 2 <= commit_ms <= 2.2
    assert timings.snapshot()["messages"] == 3


def test_the_benchmark_reads_each_phase_from_the_writers_timing_lines(
    services: Services, json_logs: io.StringIO, tmp_path: Path
) -> None:
    target = new_target(services.database_url)

    async def work(writer: SegmentWriter) -> None:
        await writer.write(target, one(0, "before"))
        await asyncio.sleep(0.1)  # a timing line for what came before
        before.write_text(json_logs.getvalue())
        writer.objects = SlowPuts(writer.objects, delay_s=0.3)
        await asyncio.gather(*(writer.write(target, one(0, f"m{i}")) for i in range(3)))

    before, after = tmp_path / "before.log", tmp_path / "after.log"
    run_writer(None, work, timings_log_s=0.02)
    after.write_text(json_logs.getvalue())  # closing the writer logged the last line
    window = phases.window(phases.latest(before), phases.latest(after))
    assert window["messages_flushed"] == 3  # the publish before the window is not counted
    assert window["put_p50_ms"] >= 300
    assert window["commit_p50_ms"] < 300
    assert "put 3" in phases.summary(window)  # "put 3xx/3xx" in the progress line
