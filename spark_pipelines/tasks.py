"""Celery tasks of the Spark pipelines: the schedule that submits Spark jobs.

A job runs in a child process (``python -m spark_pipelines.lag_analytics``), not inside the
worker: a JVM kept in every pool process would hold hundreds of megabytes for a job that runs a
few seconds every few minutes, and a driver that crashes must not take the worker with it. The
child inherits the worker's ``QUEUECORE_*`` environment, so it uses the same services; with a
cluster master (``QUEUECORE_SPARK_MASTER``) it is ``spark-submit`` with the project shipped to the
executors (spark_pipelines.submit).
Before starting one, the task checks (one indexed ``EXISTS``) that the window has snapshots (or
the month has usage), so an idle installation starts no JVM. Jobs upsert, so a run repeated or
overlapping is harmless.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import subprocess
from datetime import UTC, date, datetime, timedelta
from typing import Any

from celery import shared_task

from core import settings
from core.db import Connector
from core.errors import ServerError, ValidationFailed
from core.settings import SparkSettings
from data_plane.service import LAG_BUCKET_S
from observability import series
from observability.logging import get_logger
from observability.series_rows import lag_rows
from spark_pipelines.cli import current_month, default_window, month, timestamp
from spark_pipelines.schedule import JobInputs
from spark_pipelines.submit import job_command

# Below the beat interval (5 min), so a stuck run ends before the next one starts.
JOB_TIMEOUT_S = 240.0
# Compaction runs every 30 min and moves more bytes: it may take longer, still ending before the next.
COMPACTION_TIMEOUT_S = 1_500.0
STDERR_TAIL_CHARS = 2_000
# For this long into a month the scheduled usage aggregation also recomputes the month before:
# its last hour's counts and storage sample land in the minutes after midnight.
PREVIOUS_MONTH_GRACE_S = 3 * 3600
log = get_logger("queuecore.spark")


class SparkJobFailed(ServerError):
    """A Spark job's process exited with an error or ran past its time limit."""

    code = "SPARK_JOB_FAILED"


@shared_task(name="spark_pipelines.run_lag_analytics")
def run_lag_analytics(since: str | None = None, until: str | None = None) -> dict[str, Any]:
    """Turn the window's lag snapshots (the last 10 min by default) into the group lag series."""
    start, end = default_window(
        timestamp(since) if since else None, timestamp(until) if until else None, datetime.now(UTC)
    )
    window = {"since": start.isoformat(), "until": end.isoformat()}
    if importlib.util.find_spec("pyspark") is None:
        log.warning("spark_job_skipped", job="lag-analytics", reason="pyspark is not installed")
        return {**window, "skipped": "pyspark is not installed"}
    if not asyncio.run(job_inputs().has_snapshots(start, end)):
        return {**window, "skipped": "no snapshots in the window"}
    report = submit(
        "spark_pipelines.lag_analytics", ["--since", window["since"], "--until", window["until"]]
    )
    try:
        return {**report, **send_lag_series(start, end)}
    except Exception as error:  # the series is optional: the job's output is stored already
        log.warning("lag_series_not_sent", error=type(error).__name__)
        return report


def send_lag_series(since: datetime, until: datetime) -> dict[str, int]:
    """Hand the window's lag series (the job's output) to GreptimeDB; {} when switched off."""
    writer = series.writer(settings.greptime())
    if writer is None:
        return {}
    params = {
        "bucket_s": LAG_BUCKET_S,
        "since": since,
        "until": until,
        "limit": settings.greptime().queue_rows,
    }
    records = asyncio.run(job_inputs().lag_series(params))
    return {"seriesRowsQueued": sum(writer.offer(row) for row in lag_rows(records))}


def job_inputs() -> JobInputs:
    """The checks on fresh connections to the configured database."""
    return JobInputs(Connector(settings.database().url))


@shared_task(name="spark_pipelines.run_usage_aggregation")
def run_usage_aggregation(month: str | None = None) -> dict[str, Any]:
    """Recompute the billable usage of ``month`` (YYYY-MM; by default the current month, and
    the previous one too in the first hours of a month) from the hourly usage."""
    months = [_month(month)] if month else months_due(datetime.now(UTC))
    return {"months": [_aggregate(first) for first in months]}


def months_due(now: datetime) -> list[date]:
    """The current month, preceded by the previous one during :data:`PREVIOUS_MONTH_GRACE_S`."""
    first = current_month(now)
    started = datetime(first.year, first.month, 1, tzinfo=UTC)
    if (now - started).total_seconds() >= PREVIOUS_MONTH_GRACE_S:
        return [first]
    return [current_month(started - timedelta(days=1)), first]


def _month(text: str) -> date:
    try:
        return month(text)
    except argparse.ArgumentTypeError as exc:
        raise ValidationFailed(str(exc), field="month") from None


def _aggregate(first: date) -> dict[str, Any]:
    label = first.strftime("%Y-%m")
    if importlib.util.find_spec("pyspark") is None:
        log.warning("spark_job_skipped", job="usage-aggregation", reason="pyspark is not installed")
        return {"month": label, "skipped": "pyspark is not installed"}
    if not asyncio.run(job_inputs().has_usage(first)):
        return {"month": label, "skipped": "no usage in the month"}
    return submit("spark_pipelines.usage_aggregation", ["--month", label])


@shared_task(name="spark_pipelines.run_compaction")
def run_compaction(
    min_age_s: int | None = None, topic_ids: list[str] | None = None
) -> dict[str, Any]:
    """Merge small segments into per-partition ones (docs/compaction.md); ``min_age_s`` and
    ``topic_ids`` override the settings and limit the run to those topics."""
    if importlib.util.find_spec("pyspark") is None:
        log.warning("spark_job_skipped", job="compaction", reason="pyspark is not installed")
        return {"skipped": "pyspark is not installed"}

    config = settings.compaction()
    min_age_s = config.min_age_s if min_age_s is None else min_age_s
    candidates = job_inputs().has_compaction_candidates(config.small_object_bytes, min_age_s)
    if not asyncio.run(candidates):
        return {"skipped": "nothing to compact"}
    args = ["--min-age-s", str(min_age_s)]
    for topic_id in topic_ids or []:
        args += ["--topic-id", topic_id]
    return submit("spark_pipelines.compaction", args, COMPACTION_TIMEOUT_S)


def submit(module: str, args: list[str], timeout_s: float = JOB_TIMEOUT_S) -> dict[str, Any]:
    """Run a job module in a child process (``spark-submit`` on a cluster master); its report
    (the last line it prints, JSON)."""
    command = job_command(module, args, SparkSettings.from_env())
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        raise SparkJobFailed(f"{module} ran past {timeout_s:.0f} s", module=module) from None
    if done.returncode != 0:
        tail = done.stderr[-STDERR_TAIL_CHARS:]
        log.error("spark_job_failed", module=module, exit_code=done.returncode, stderr=tail)
        raise SparkJobFailed(f"{module} exited with {done.returncode}", module=module)
    lines = done.stdout.strip().splitlines()
    report: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    log.info("spark_job_done", module=module, **report)
    return report
