"""One local SparkSession for the whole test session (it takes seconds to start)."""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.services import unavailable


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """``local[2]``, UI off, built as the jobs build theirs; a missing Java or PySpark skips on a
    laptop and fails under ``CI=true``."""
    if importlib.util.find_spec("pyspark") is None:
        unavailable("pyspark is not installed (pip install -e '.[spark]')")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        unavailable("Spark needs Java 17+ on PATH or JAVA_HOME")
    from spark_pipelines.session import SparkSettings, build_session

    # py4j logs at INFO from finalizers at interpreter exit, after pytest closed the streams.
    logging.getLogger("py4j").setLevel(logging.WARNING)

    try:
        session = build_session("queuecore-tests", SparkSettings("local[2]", 2))
    except Exception as exc:
        unavailable(f"Spark did not start: {type(exc).__name__}: {exc}")
    yield session
    session.stop()
