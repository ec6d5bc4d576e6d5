"""``queuecore spark …``: run a Spark job once, from the command line or a Celery task.

PySpark is imported only when a job runs: ``queuecore`` builds this parser for every
sub-command, and a worker or API process without the ``spark`` extra must still start.
"""

from __future__ import annotations

import argparse
import importlib
from datetime import UTC, date, datetime, timedelta
from typing import Any

# The lag analytics job's default window, as beat runs it (every 5 min): each bucket is computed
# in two runs, so one whose snapshot came late is filled in by the next.
LAG_WINDOW_S = 600
JOB_MODULES = {
    "lag-analytics": "spark_pipelines.lag_analytics",
    "usage-aggregation": "spark_pipelines.usage_aggregation",
    "compaction": "spark_pipelines.compaction",
}


def add_spark_parser(sub: Any) -> None:
    """Register ``spark`` and its jobs on the ``queuecore`` parser."""
    spark = sub.add_parser("spark", help="run a Spark job once (master: QUEUECORE_SPARK_MASTER)")
    jobs = spark.add_subparsers(dest="spark_job", required=True)
    add_lag_analytics_arguments(
        jobs.add_parser(
            "lag-analytics",
            help="turn lag snapshots into per-group lag, rate and time-to-drain series",
        )
    )
    add_usage_aggregation_arguments(
        jobs.add_parser(
            "usage-aggregation",
            help="turn hourly usage into per-project billable usage of a month",
        )
    )
    add_compaction_arguments(
        jobs.add_parser(
            "compaction",
            help="merge small multi-tenant segments into per-partition segments",
        )
    )


def add_lag_analytics_arguments(parser: argparse.ArgumentParser) -> None:
    """``--since``, ``--until`` and ``--bucket-s`` of the lag analytics job."""
    parser.add_argument(
        "--since",
        type=timestamp,
        default=None,
        help="ISO 8601 (UTC if no offset); default: until - 10 min",
    )
    parser.add_argument(
        "--until", type=timestamp, default=None, help="ISO 8601 (UTC if no offset); default: now"
    )
    parser.add_argument("--bucket-s", type=int, default=60, help="bucket width in seconds")


def add_usage_aggregation_arguments(parser: argparse.ArgumentParser) -> None:
    """``--month`` of the usage aggregation job."""
    parser.add_argument(
        "--month", type=month, default=None, help="YYYY-MM (UTC); default: the current month"
    )


def add_compaction_arguments(parser: argparse.ArgumentParser) -> None:
    """Overrides of the ``QUEUECORE_COMPACTION_*`` settings, and the topics to limit it to."""
    parser.add_argument(
        "--min-age-s",
        type=non_negative,
        default=None,
        help="only blocks older than this (default 600)",
    )
    parser.add_argument(
        "--small-object-bytes",
        type=non_negative,
        default=None,
        help="only blocks in objects smaller than this (default 4 MiB)",
    )
    parser.add_argument(
        "--target-bytes",
        type=non_negative,
        default=None,
        help="source bytes per output object at most (default 32 MiB)",
    )
    parser.add_argument(
        "--topic-id",
        action="append",
        default=[],
        help="compact only this topic (repeatable; default: every topic)",
    )


def non_negative(text: str) -> int:
    """An integer that is 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def month(text: str) -> date:
    """``YYYY-MM`` as the first day of that month."""
    try:
        return datetime.strptime(text, "%Y-%m").date()
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a month (YYYY-MM): {text!r}") from None


def current_month(now: datetime) -> date:
    """The first day of ``now``'s UTC month."""
    return now.astimezone(UTC).date().replace(day=1)


def timestamp(text: str) -> datetime:
    """An ISO 8601 time; one without an offset is UTC."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def default_window(
    since: datetime | None, until: datetime | None, now: datetime, bucket_s: int = 60
) -> tuple[datetime, datetime]:
    """``until`` defaults to the start of the current bucket, ``since`` to :data:`LAG_WINDOW_S`
    before ``until``."""
    if until is None:
        until = datetime.fromtimestamp(int(now.timestamp()) // bucket_s * bucket_s, UTC)
    return since or until - timedelta(seconds=LAG_WINDOW_S), until


def run(args: argparse.Namespace) -> int:
    """Run the job named on the command line; prints its report as one JSON line."""
    job = importlib.import_module(JOB_MODULES[args.spark_job])
    return int(job.run_cli(args))
