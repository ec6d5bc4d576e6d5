"""The SparkSession of QueueCore's jobs, built from ``QUEUECORE_SPARK_*`` settings.

``QUEUECORE_SPARK_MASTER`` is ``local[*]`` by default (PySpark in this process, Java 17+ on
PATH), or a cluster's master URL. The web UI is off: nobody looks at it for minute-long batch
jobs and it would take a port. Times are UTC (the jobs pass epoch seconds anyway).
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.settings import PREFIX, SettingsError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# local, local[4], local[*], local[4,2] (with task retries), or a cluster manager's URL.
_MASTER = re.compile(r"^(local(\[(\*|\d+)(,\d+)?\])?|(spark|k8s|mesos)://\S+|yarn)$")


@dataclass(frozen=True, slots=True)
class SparkSettings:
    """Where Spark runs and how many partitions its shuffles make."""

    master: str = "local[*]"
    shuffle_partitions: int = 4

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SparkSettings:
        """Read and validate ``QUEUECORE_SPARK_MASTER`` and ``QUEUECORE_SPARK_SHUFFLE_PARTITIONS``."""
        source = os.environ if env is None else env
        master = source.get(PREFIX + "SPARK_MASTER") or "local[*]"
        if not _MASTER.match(master):
            raise SettingsError(
                PREFIX + "SPARK_MASTER",
                f"must be local, local[N], local[*] or a spark://, k8s:// or yarn master, got {master!r}",
            )
        return cls(master, _partitions(source.get(PREFIX + "SPARK_SHUFFLE_PARTITIONS") or "4"))

    @property
    def local(self) -> bool:
        """Whether the executors run in this process's JVM, on this machine."""
        return self.master.startswith("local")


def _partitions(raw: str) -> int:
    # A lag window is small: Spark's default of 200 shuffle partitions would be 200 tiny tasks.
    variable = PREFIX + "SPARK_SHUFFLE_PARTITIONS"
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(variable, f"must be an integer, got {raw!r}") from None
    if not 1 <= value <= 10_000:
        raise SettingsError(variable, f"must be between 1 and 10000, got {value}")
    return value


@functools.cache
def spark_settings() -> SparkSettings:
    """The process's Spark settings."""
    return SparkSettings.from_env()


def build_session(app_name: str, config: SparkSettings | None = None) -> SparkSession:
    """A SparkSession for a job (the running one, if this process has one already)."""
    from pyspark.sql import SparkSession

    config = config or spark_settings()
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
