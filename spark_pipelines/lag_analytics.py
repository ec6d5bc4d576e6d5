"""Lag analytics: lag snapshots → per group and time bucket, lag, consume and produce rates and
the estimated time to drain (table ``lag_series``, served by ``GET …/groups/{group}/lag``).

Per partition, consecutive snapshots make a *step* (a window function over the partition's
snapshots in time order): Δt, Δcommitted (consumed) and Δhigh-watermark (produced). A step
counts towards a rate only if Δt is at most :data:`MAX_STEP_S` and its Δ is not negative: a
seek or reset moves the committed offset back, and that is no consumption, so the step gives no
consume rate (its produce rate still counts). A partition's first snapshot (a new group, or a
partition added to the topic) has no step. A missing snapshot makes one longer step, whose rate
is the average over the gap. Per bucket and partition, rate = ΣΔ / ΣΔt over the usable steps
ending in the bucket; the group's rate is the sum over its partitions that have one (NULL if
none has). The bucket's lag is the sum of each partition's last lag in it. Time to drain =
lag / (consume - produce) when that is positive, 0 when there is no lag, else NULL.

No JDBC (Spark's PostgreSQL driver jar does not ship with PySpark): psycopg inside Spark tasks.
The window is cut into time slices and each task reads one (an index range scan on
``taken_at``), so rows go from PostgreSQL to the executors in parallel and never through the
driver. Each partition of the result is upserted in one transaction (``foreachPartition``): a
task Spark retries, or a re-run over the same window, replaces its rows instead of adding more.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import Column, DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from core import settings
from core.db import connect_tuples
from core.settings import SettingsError
from data_plane.groups.lag import BUCKET_S
from spark_pipelines import queries as q
from spark_pipelines import sink
from spark_pipelines.cli import add_lag_analytics_arguments, default_window
from spark_pipelines.session import build_session

APP_NAME = "queuecore-lag-analytics"
# A step longer than this gives no rate (an hour-long gap says little about this minute's
# pace); it is also how far before the window the job reads, for the first steps' predecessors.
MAX_STEP_S = 900

SNAPSHOT_SCHEMA = StructType(
    [
        StructField("group_id", StringType(), False),
        StructField("environment_id", StringType(), False),
        StructField("topic_id", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("taken_at_s", LongType(), False),
        StructField("committed_offset", LongType(), False),
        StructField("high_watermark", LongType(), False),
        StructField("lag", LongType(), False),
    ]
)
POINT_COLUMNS = (
    "group_id",
    "environment_id",
    "topic_id",
    "bucket_start_s",
    "partitions",
    "lag",
    "consume_rate",
    "produce_rate",
    "time_to_drain_s",
)


@dataclass(frozen=True, slots=True)
class LagAnalyticsReport:
    """What one run covered and how many points it wrote."""

    since: datetime
    until: datetime
    bucket_s: int
    points: int

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly (the CLI's output, the Celery task's result)."""
        return {
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "bucketS": self.bucket_s,
            "points": self.points,
        }


def run(
    spark: SparkSession,
    database_url: str,
    since: datetime,
    until: datetime,
    bucket_s: int = BUCKET_S,
) -> LagAnalyticsReport:
    """Compute and upsert the points of the whole buckets inside ``[since, until)``."""
    since_s, until_s = aligned_window(since, until, bucket_s)
    written = 0
    if since_s < until_s:
        snapshots = read_snapshots(spark, database_url, since_s - MAX_STEP_S, until_s)
        written = write_points(
            compute(snapshots, since_s, until_s, bucket_s), database_url, bucket_s
        )
    return LagAnalyticsReport(_time(since_s), _time(max(since_s, until_s)), bucket_s, written)


def aligned_window(since: datetime, until: datetime, bucket_s: int) -> tuple[int, int]:
    """Epoch seconds of the first and past-the-last bucket wholly inside ``[since, until)``:
    a partial bucket at either end would overwrite a complete one with part of its data."""
    if bucket_s <= 0:
        raise ValueError("bucket_s must be positive")
    since_s, until_s = since.timestamp(), until.timestamp()
    return -(-int(since_s) // bucket_s) * bucket_s, int(until_s) // bucket_s * bucket_s


def _time(epoch_s: int) -> datetime:
    return datetime.fromtimestamp(epoch_s, UTC)


# --- read ------------------------------------------------------------------------------------


def read_snapshots(spark: SparkSession, database_url: str, from_s: int, until_s: int) -> DataFrame:
    """The snapshots of ``[from_s, until_s)``, read by Spark tasks, one time slice each."""
    slices = time_slices(from_s, until_s, spark.sparkContext.defaultParallelism)
    rows = spark.sparkContext.parallelize(slices, len(slices)).flatMap(
        functools.partial(_read_slice, database_url)
    )
    return spark.createDataFrame(rows, SNAPSHOT_SCHEMA)


def time_slices(from_s: int, until_s: int, count: int) -> list[tuple[int, int]]:
    """``[from_s, until_s)`` cut into at most ``count`` contiguous, non-empty slices."""
    count = max(1, min(count, until_s - from_s))
    bounds = [from_s + (until_s - from_s) * i // count for i in range(count + 1)]
    return list(itertools.pairwise(bounds))


def _read_slice(database_url: str, bounds: tuple[int, int]) -> Iterator[tuple[Any, ...]]:
    """Runs in a Spark task: one slice's rows, streamed through a server-side cursor."""
    with (
        connect_tuples(database_url) as conn,
        conn.cursor(name="lag_snapshot_slice") as cursor,
    ):
        cursor.itersize = 10_000
        cursor.execute(q.SELECT_SNAPSHOT_SLICE, {"from_s": bounds[0], "until_s": bounds[1]})
        yield from cursor


# --- compute ---------------------------------------------------------------------------------


def compute(
    snapshots: DataFrame, since_s: int, until_s: int, bucket_s: int = BUCKET_S
) -> DataFrame:
    """Points (:data:`POINT_COLUMNS`) of the buckets starting in ``[since_s, until_s)``.

    ``snapshots`` may (and should) reach :data:`MAX_STEP_S` before ``since_s``: those rows give
    the first steps of the window their predecessors but no points of their own.
    """
    steps = _steps(snapshots).withColumn(
        "bucket_start_s", F.col("taken_at_s") - F.pmod(F.col("taken_at_s"), F.lit(bucket_s))
    )
    in_window = steps.where(F.col("bucket_start_s").between(since_s, until_s - 1))
    per_partition = in_window.groupBy(
        "group_id", "environment_id", "topic_id", "partition", "bucket_start_s"
    ).agg(
        F.max_by("lag", "taken_at_s").alias("lag"),
        _rate("consumed").alias("consume_rate"),
        _rate("produced").alias("produce_rate"),
    )
    per_group = per_partition.groupBy(
        "group_id", "environment_id", "topic_id", "bucket_start_s"
    ).agg(
        F.count("*").cast("int").alias("partitions"),
        F.sum("lag").alias("lag"),
        F.sum("consume_rate").alias("consume_rate"),  # the sum ignores NULLs; all NULL → NULL
        F.sum("produce_rate").alias("produce_rate"),
    )
    return per_group.withColumn("time_to_drain_s", _time_to_drain()).select(*POINT_COLUMNS)


def _steps(snapshots: DataFrame) -> DataFrame:
    """Each snapshot with the step from its partition's previous one (NULL for the first)."""
    previous = Window.partitionBy("group_id", "partition").orderBy("taken_at_s")

    def delta(column: str) -> Column:
        return F.col(column) - F.lag(column).over(previous)

    return snapshots.select(
        "group_id",
        "environment_id",
        "topic_id",
        "partition",
        "taken_at_s",
        "lag",
        delta("taken_at_s").alias("dt"),
        delta("committed_offset").alias("consumed"),
        delta("high_watermark").alias("produced"),
    )


def _rate(delta: str) -> Column:
    """ΣΔ / ΣΔt over the usable steps: short enough, and not backwards (a seek, a reset)."""
    usable = F.col("dt").between(1, MAX_STEP_S) & (F.col(delta) >= 0)
    return F.sum(F.when(usable, F.col(delta))) / F.sum(F.when(usable, F.col("dt")))


def _time_to_drain() -> Column:
    draining = F.col("consume_rate") - F.col("produce_rate")
    return F.when(F.col("lag") == 0, F.lit(0.0)).when(draining > 0, F.col("lag") / draining)


# --- write -----------------------------------------------------------------------------------


def write_points(points: DataFrame, database_url: str, bucket_s: int) -> int:
    """Upsert the points, each Spark partition in one transaction; how many were written."""
    return sink.upsert(
        points, database_url, q.UPSERT_SERIES, functools.partial(_columns, bucket_s=bucket_s)
    )


def _columns(batch: Sequence[Row], bucket_s: int) -> dict[str, Any]:
    """The UPSERT_SERIES parameters: one array per column."""

    def column(name: str) -> list[Any]:
        return [row[name] for row in batch]

    return {
        "bucket_s": bucket_s,
        "group_ids": column("group_id"),
        "bucket_starts_s": column("bucket_start_s"),
        "environment_ids": column("environment_id"),
        "topic_ids": column("topic_id"),
        "partitions": column("partitions"),
        "lags": column("lag"),
        "consume_rates": column("consume_rate"),
        "produce_rates": column("produce_rate"),
        "drain_s": column("time_to_drain_s"),
    }


# --- command line ----------------------------------------------------------------------------


def run_cli(args: argparse.Namespace) -> int:
    """Run once on a session built from the settings; print the report as one JSON line."""
    since, until = default_window(args.since, args.until, datetime.now(UTC), args.bucket_s)
    database_url = settings.database().url
    spark = build_session(APP_NAME)
    try:
        report = run(spark, database_url, since, until, args.bucket_s)
    finally:
        spark.stop()
    print(json.dumps(report.as_dict()), flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m spark_pipelines.lag_analytics [--since …] [--until …] [--bucket-s 60]``."""
    parser = argparse.ArgumentParser(prog="lag-analytics", description=__doc__.splitlines()[0])
    add_lag_analytics_arguments(parser)
    try:
        return run_cli(parser.parse_args(argv))
    except SettingsError as exc:
        print(f"lag-analytics: configuration error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
