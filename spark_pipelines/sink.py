"""Writing a DataFrame's rows back to PostgreSQL from the Spark tasks.

PySpark ships no JDBC driver jar, so each task writes its own partition with psycopg: one
connection and one transaction per partition, one statement per batch of rows (the statement
takes one array per column). A task Spark retries writes its rows again, so the statements are
upserts.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from pyspark import Accumulator
from pyspark.sql import DataFrame, Row

from core.db import connect_tuples

WRITE_BATCH = 5_000
Params = Callable[[Sequence[Row]], dict[str, Any]]


def upsert(frame: DataFrame, database_url: str, statement: str, params: Params) -> int:
    """Run ``statement`` with ``params(batch)`` over every batch of ``frame``; rows written."""
    written = frame.sparkSession.sparkContext.accumulator(0)
    frame.foreachPartition(
        functools.partial(_write_partition, database_url, statement, params, written)
    )
    return int(written.value)


def _write_partition(
    database_url: str,
    statement: str,
    params: Params,
    written: Accumulator[int],
    rows: Iterable[Row],
) -> None:
    """Runs in a Spark task. Connects only if the partition has rows."""
    batches = batched(rows, WRITE_BATCH)
    first = next(batches, None)
    if first is None:
        return
    with connect_tuples(database_url) as conn:
        for batch in itertools.chain([first], batches):
            conn.execute(statement, params(batch))
            written.add(len(batch))


def batched(rows: Iterable[Row], size: int) -> Iterator[tuple[Row, ...]]:
    """``itertools.batched`` (Python 3.12+) for 3.11."""
    iterator = iter(rows)
    while batch := tuple(itertools.islice(iterator, size)):
        yield batch
