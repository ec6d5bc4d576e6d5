"""Usage aggregation: hourly usage → per project and calendar month (UTC), the billable
quantities and an estimated amount (table ``usage_monthly``, docs/billing.md).

Per project, over the environments of the project and the hours of the month: messages, payload
bytes and requests are summed; stored bytes are summed as byte-hours (each hour's average of its
samples, an hour without samples adds 0). The billable quantities are in decimal units:
messages in millions, GB (10^9 bytes) in and out, GB-months of storage (byte-hours / 10^9 /
the month's hours) and requests. The estimate applies the organisation's tier's list prices
(:mod:`billing.plans`), computed when the rows are written.

As the lag analytics job: no JDBC, psycopg inside Spark tasks. The month is cut into time slices,
each task reads one (an index range scan on ``hour``), and each partition of the result is
upserted in one transaction on ``(project_id, month)``: a re-run over the same month, or a task
Spark retries, replaces its rows instead of adding to them.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from billing import plans
from core import settings
from core.db import connect_tuples
from core.settings import SettingsError
from spark_pipelines import queries as q
from spark_pipelines import sink
from spark_pipelines.cli import add_usage_aggregation_arguments, current_month
from spark_pipelines.lag_analytics import time_slices
from spark_pipelines.session import build_session

APP_NAME = "queuecore-usage-aggregation"
MILLION = 1_000_000.0
GB = 1_000_000_000.0
HOUR_S = 3600

COUNTS = (
    "messages_in",
    "bytes_in",
    "messages_out",
    "bytes_out",
    "publish_requests",
    "consume_requests",
    "admin_requests",
)
HOURLY_SCHEMA = StructType(
    [
        StructField("organisation_id", StringType(), False),
        StructField("project_id", StringType(), False),
        StructField("tier", StringType(), False),
        StructField("hour_s", LongType(), False),
        *(StructField(name, LongType(), False) for name in COUNTS),
        StructField("storage_bytes", DoubleType(), False),  # the hour's average
    ]
)
# Per project: the organisation, its tier and the month's sums, then the billable quantities.
TOTAL_COLUMNS = (
    "project_id",
    "organisation_id",
    "tier",
    "messages_in",
    "messages_out",
    "bytes_in",
    "bytes_out",
    "publish_requests",
    "consume_requests",
    "admin_requests",
    "storage_byte_hours",
)
QUANTITY_COLUMNS = (
    "messages_in_millions",
    "messages_out_millions",
    "gb_in",
    "gb_out",
    "storage_gb_months",
    "requests",
)
MONTHLY_COLUMNS = (*TOTAL_COLUMNS, *QUANTITY_COLUMNS)


@dataclass(frozen=True, slots=True)
class UsageAggregationReport:
    """Which month one run covered and how many project rows it wrote."""

    month: date
    projects: int

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly (the CLI's output, the Celery task's result)."""
        return {"month": self.month.strftime("%Y-%m"), "projects": self.projects}


def run(spark: SparkSession, database_url: str, month: date) -> UsageAggregationReport:
    """Compute and upsert every project's usage of the month starting on ``month``."""
    since_s, until_s = month_bounds_s(month)
    hourly = read_hourly(spark, database_url, since_s, until_s)
    monthly = compute(hourly, (until_s - since_s) // HOUR_S)
    return UsageAggregationReport(month, write_monthly(monthly, database_url, month))


def month_bounds_s(month: date) -> tuple[int, int]:
    """Epoch seconds of the month's first instant and of the next month's (UTC)."""
    first = datetime(month.year, month.month, 1, tzinfo=UTC)
    following = datetime(month.year + month.month // 12, month.month % 12 + 1, 1, tzinfo=UTC)
    return int(first.timestamp()), int(following.timestamp())


# --- read ------------------------------------------------------------------------------------


def read_hourly(spark: SparkSession, database_url: str, since_s: int, until_s: int) -> DataFrame:
    """The hourly rows of ``[since_s, until_s)`` with their project, read by Spark tasks."""
    slices = time_slices(since_s, until_s, spark.sparkContext.defaultParallelism)
    rows = spark.sparkContext.parallelize(slices, len(slices)).flatMap(
        functools.partial(_read_slice, database_url)
    )
    return spark.createDataFrame(rows, HOURLY_SCHEMA)


def _read_slice(database_url: str, bounds: tuple[int, int]) -> Iterator[tuple[Any, ...]]:
    """Runs in a Spark task: one slice's rows, streamed through a server-side cursor."""
    with (
        connect_tuples(database_url) as conn,
        conn.cursor(name="usage_hourly_slice") as cursor,
    ):
        cursor.itersize = 10_000
        cursor.execute(q.SELECT_HOURLY_SLICE, {"from_s": bounds[0], "until_s": bounds[1]})
        yield from cursor


# --- compute ---------------------------------------------------------------------------------


def compute(hourly: DataFrame, hours_in_month: int) -> DataFrame:
    """One row per project (:data:`MONTHLY_COLUMNS`): sums and billable quantities."""
    # The tier is read per slice: max() keeps one value if it changed during the read.
    totals = hourly.groupBy("organisation_id", "project_id").agg(
        F.max("tier").alias("tier"),
        *(F.sum(name).cast("long").alias(name) for name in COUNTS),
        F.sum("storage_bytes").alias("storage_byte_hours"),
    )
    return totals.select(
        *(F.col(name) for name in TOTAL_COLUMNS),
        _per("messages_in", MILLION).alias("messages_in_millions"),
        _per("messages_out", MILLION).alias("messages_out_millions"),
        _per("bytes_in", GB).alias("gb_in"),
        _per("bytes_out", GB).alias("gb_out"),
        _per("storage_byte_hours", GB * hours_in_month).alias("storage_gb_months"),
        (F.col("publish_requests") + F.col("consume_requests") + F.col("admin_requests")).alias(
            "requests"
        ),
    )


def _per(column: str, unit: float) -> Column:
    return F.col(column).cast("double") / F.lit(unit)


# --- write -----------------------------------------------------------------------------------


def write_monthly(monthly: DataFrame, database_url: str, month: date) -> int:
    """Upsert the month's rows, each Spark partition in one transaction; how many were written."""
    return sink.upsert(
        monthly, database_url, q.UPSERT_MONTHLY, functools.partial(_columns, month=month)
    )


def _columns(batch: Sequence[Row], month: date) -> dict[str, Any]:
    """The UPSERT_MONTHLY parameters: one array per column, and the estimates."""
    columns: dict[str, Any] = {
        f"{name}s" if name in ("project_id", "organisation_id", "tier") else name: [
            row[name] for row in batch
        ]
        for name in MONTHLY_COLUMNS
    }
    columns["month"] = month
    columns["estimated_amount_cents"] = [_estimate(row) for row in batch]
    return columns


def _estimate(row: Row) -> int:
    usage = plans.BillableUsage(
        messages_in=row["messages_in"],
        messages_out=row["messages_out"],
        bytes_in=row["bytes_in"],
        bytes_out=row["bytes_out"],
        requests=row["requests"],
        storage_gb_months=row["storage_gb_months"],
    )
    return plans.estimate_cents(row["tier"], usage)


# --- command line ----------------------------------------------------------------------------


def run_cli(args: argparse.Namespace) -> int:
    """Run once on a session built from the settings; print the report as one JSON line."""
    month = args.month or current_month(datetime.now(UTC))
    database_url = settings.database().url
    spark = build_session(APP_NAME)
    try:
        report = run(spark, database_url, month)
    finally:
        spark.stop()
    print(json.dumps(report.as_dict()), flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m spark_pipelines.usage_aggregation [--month YYYY-MM]``."""
    parser = argparse.ArgumentParser(prog="usage-aggregation", description=__doc__.splitlines()[0])
    add_usage_aggregation_arguments(parser)
    try:
        return run_cli(parser.parse_args(argv))
    except SettingsError as exc:
        print(f"usage-aggregation: configuration error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
