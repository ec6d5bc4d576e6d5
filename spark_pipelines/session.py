"""The SparkSession of QueueCore's jobs, built from ``QUEUECORE_SPARK_*`` settings.

``QUEUECORE_SPARK_MASTER`` is ``local[*]`` by default (PySpark in this process, Java 17+ on
PATH), or a cluster's master URL. The web UI is off: nobody looks at it for minute-long batch
jobs and it would take a port. Times are UTC (the jobs pass epoch seconds anyway).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from core import settings
from core.settings import SparkSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def build_session(app_name: str, config: SparkSettings | None = None) -> SparkSession:
    """A SparkSession for a job (the running one, if this process has one already)."""
    from pyspark.sql import SparkSession

    config = config or settings.spark()
    if config.local:
        # Local Python workers are started as ``$PYSPARK_PYTHON`` (default: ``python3`` on
        # PATH, which need not be this virtualenv and lack psycopg): use this interpreter.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master(config.master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(config.shuffle_partitions))
        .getOrCreate()
    )
    if not config.local:
        from spark_pipelines.submit import ship_project

        ship_project(session)
    return session
