"""Segment compaction: runs of small blocks of a partition → one per-partition segment object.

Each flush of the group-commit writer makes one small object with a block per (topic,
partition), so a partition's data ends up spread over many tiny objects: many index rows and
one GET per block for a reader going through it. This job merges them (DESIGN §6,
docs/compaction.md):

1. **Plan** (driver, SQL): per (topic, partition), runs of consecutive blocks that live in
   objects smaller than ``small_object_bytes`` and are older than ``min_age_s`` (never the newest
   blocks, next to which writers append), cut at ``target_bytes`` of source blocks. A run of one
   block is left alone.
2. **Compact** (one Spark task per run): range-GET each source block, verify it (CRC32C, and
   that it is the block its index row describes), re-encode all its messages, unchanged and in
   order, as the one block of a new object ``segments/compacted/…``, check the encoding
   decodes back to the same messages, PUT it.
3. **Swap** (driver, one transaction per run): lock the partition row as the writer and
   retention do, check the index rows of the run are exactly the ones read, register the new
   object, stamp the old ones ``released_at``, delete the old rows and insert the new one.

A run whose rows changed meanwhile (retention dropped some, another compaction swapped them,
the topic is being deleted) is not swapped: its new object is an orphan for the GC. A crash at
any point leaves the old index intact. Old objects keep existing until the orphan GC's grace
period has passed since ``released_at``, so a reader that looked the old rows up just before the
swap still finds them. Offsets never change, so consumer groups do not notice.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from pyspark.sql import SparkSession

from core import settings
from core.db import connect
from core.object_store import S3ObjectStore
from core.settings import CompactionSettings, ObjectStoreSettings, SettingsError
from data_plane.read.reader import BlockRow, verified_block
from data_plane.write.segment import Message, decode_segment, encode_segment
from observability.logging import get_logger
from spark_pipelines import queries as q
from spark_pipelines.cli import add_compaction_arguments
from spark_pipelines.session import build_session

APP_NAME = "queuecore-compaction"
COMPACTED_PREFIX = "segments/compacted/"
# The partition row is the writer's sequencer lock: a swap waits for it this long, then gives up.
LOCK_TIMEOUT = "5s"
log = get_logger("queuecore.compaction")


@dataclass(frozen=True, slots=True)
class Run:
    """Consecutive blocks of one partition to merge into one object."""

    topic_id: str
    partition: int
    blocks: tuple[BlockRow, ...]

    @property
    def first(self) -> int:
        """The first offset of the run."""
        return self.blocks[0].base_offset

    @property
    def end(self) -> int:
        """One past the last offset of the run."""
        return self.blocks[-1].base_offset + self.blocks[-1].count

    @property
    def source_keys(self) -> list[str]:
        """The objects the run's blocks live in."""
        return sorted({block.object_key for block in self.blocks})


@dataclass(frozen=True, slots=True)
class Compacted:
    """A Spark task's result: the new object of a run, or why there is none."""

    run: Run
    object_key: str = ""
    size_bytes: int = 0
    block: dict[str, int] = field(default_factory=dict)
    put_at_s: float = 0.0
    error: str | None = None


@dataclass(slots=True)
class CompactionReport:
    """What one run of the job did."""

    runs: int = 0
    swapped: int = 0
    aborted: int = 0
    failed: int = 0
    blocks_merged: int = 0
    bytes_written: int = 0

    def as_dict(self) -> dict[str, int]:
        """JSON-friendly (the CLI's output, the Celery task's result)."""
        return {
            "runs": self.runs,
            "swapped": self.swapped,
            "aborted": self.aborted,
            "failed": self.failed,
            "blocksMerged": self.blocks_merged,
            "bytesWritten": self.bytes_written,
        }


def run(
    spark: SparkSession,
    database_url: str,
    store: ObjectStoreSettings,
    config: CompactionSettings,
    grace_s: int,
    topic_ids: Sequence[str] | None = None,
) -> CompactionReport:
    """Plan, compact in Spark tasks, swap each run that is still current."""
    with connect(database_url, autocommit=True) as conn:
        runs = plan(conn, config, topic_ids)
        report = CompactionReport(runs=len(runs))
        for result in compact(spark, store, runs):
            _settle(conn, result, grace_s / 2, report)
    return report


def _settle(
    conn: psycopg.Connection[dict[str, Any]],
    result: Compacted,
    max_put_age_s: float,
    report: CompactionReport,
) -> None:
    where = {"topic_id": result.run.topic_id, "partition": result.run.partition}
    if result.error is not None:
        report.failed += 1
        log.warning("compaction_run_failed", error=result.error[:300], **where)
    elif swap(conn, result, max_put_age_s):
        report.swapped += 1
        report.blocks_merged += len(result.run.blocks)
        report.bytes_written += result.size_bytes
    else:
        report.aborted += 1
        log.info("compaction_swap_aborted", object_key=result.object_key, **where)


# --- plan ------------------------------------------------------------------------------------


def plan(
    conn: psycopg.Connection[dict[str, Any]],
    config: CompactionSettings,
    topic_ids: Sequence[str] | None = None,
) -> list[Run]:
    """The runs worth merging now (of ``topic_ids`` only, if given)."""
    params = {
        "small_object_bytes": config.small_object_bytes,
        "min_age_s": config.min_age_s,
        "topic_ids": list(topic_ids) if topic_ids is not None else None,
        "max_blocks": config.max_blocks,
    }
    rows = conn.execute(q.SELECT_CANDIDATE_BLOCKS, params).fetchall()
    return cut_runs(rows, config.target_bytes)


def cut_runs(rows: Iterable[Mapping[str, Any]], target_bytes: int) -> list[Run]:
    """Contiguous blocks of a partition, at most ``target_bytes`` of them a run, two or more."""
    runs: list[Run] = []
    current: list[BlockRow] = []
    owner: tuple[str, int] | None = None
    for row in rows:
        block = BlockRow(*(row[name] for name in BlockRow.__slots__))
        here = (row["topic_id"], row["partition"])
        if here != owner or not _extends(current, block, target_bytes):
            _close(runs, owner, current)
            current, owner = [], here
        current.append(block)
    _close(runs, owner, current)
    return runs


def _extends(current: list[BlockRow], block: BlockRow, target_bytes: int) -> bool:
    last = current[-1]
    size = sum(b.byte_length for b in current) + block.byte_length
    return block.base_offset == last.base_offset + last.count and size <= target_bytes


def _close(runs: list[Run], owner: tuple[str, int] | None, blocks: list[BlockRow]) -> None:
    if owner is not None and len(blocks) >= 2:
        runs.append(Run(owner[0], owner[1], tuple(blocks)))


# --- compact (Spark tasks) ---------------------------------------------------------------------


def compact(spark: SparkSession, store: ObjectStoreSettings, runs: list[Run]) -> list[Compacted]:
    """One Spark task per run; their results, collected in the driver."""
    if not runs:
        return []
    tasks = spark.sparkContext.parallelize(runs, len(runs))
    return tasks.map(functools.partial(compact_run, store)).collect()


def compact_run(store_settings: ObjectStoreSettings, run: Run) -> Compacted:
    """Runs in a Spark task: read and verify the run's blocks, write them as one new object."""
    try:
        store = S3ObjectStore.from_settings(store_settings)
        messages = [m for block in run.blocks for m in _read_block(store, run, block)]
        data, block = _encode(run, messages)
        key = compacted_key(run)
        store.put(key, data)
    except Exception as exc:  # one bad run must not fail the others
        return Compacted(run, error=f"{type(exc).__name__}: {exc}")
    return Compacted(run, key, len(data), block, time.time())


def _read_block(store: S3ObjectStore, run: Run, block: BlockRow) -> list[Message]:
    last_byte = block.byte_offset + block.byte_length - 1
    data = store.get(block.object_key, block.byte_offset, last_byte)
    return verified_block(data, run.topic_id, run.partition, block)


def _encode(run: Run, messages: list[Message]) -> tuple[bytes, dict[str, int]]:
    """The new object and its one block's index fields; re-decoded to prove it round-trips."""
    if len(messages) != run.end - run.first:
        raise ValueError(f"read {len(messages)} messages for offsets {run.first}..{run.end}")
    data, refs = encode_segment({(run.topic_id, run.partition): messages})
    if decode_segment(data) != {(run.topic_id, run.partition): messages}:
        raise ValueError("the compacted object does not decode to the messages read")
    (ref,) = refs
    block = {
        "byte_offset": ref.offset,
        "byte_length": ref.length,
        "count": ref.count,
        "min_timestamp_ms": ref.min_timestamp_ms,
        "max_timestamp_ms": ref.max_timestamp_ms,
    }
    return data, block


def compacted_key(run: Run) -> str:
    """A key no other run or writer uses (a retried task writes a new orphan, never over one)."""
    return (
        f"{COMPACTED_PREFIX}{run.topic_id}/{run.partition}/"
        f"{run.first:020d}-{run.end:020d}-{uuid.uuid4().hex}.seg"
    )


# --- swap ------------------------------------------------------------------------------------


def swap(conn: psycopg.Connection[dict[str, Any]], result: Compacted, max_put_age_s: float) -> bool:
    """Replace the run's index rows by the new block in one transaction; False if not current.

    An object older than ``max_put_age_s`` is not registered: the orphan GC may already be
    deleting it, since it had no ``segment_objects`` row for longer than its grace period.
    """
    if time.time() - result.put_at_s > max_put_age_s:
        return False
    run = result.run
    params: dict[str, Any] = {
        "topic_id": run.topic_id,
        "partition": run.partition,
        "first": run.first,
        "end": run.end,
    }
    try:
        with conn.transaction():
            conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            created_at = _current_sources(conn, run, params)
            if created_at is None:
                return False
            _replace(conn, result, {**params, **result.block, "created_at": created_at})
    except psycopg.errors.LockNotAvailable:
        return False
    return True


def _current_sources(
    conn: psycopg.Connection[dict[str, Any]], run: Run, params: dict[str, Any]
) -> Any:
    """Under the partition lock: the newest source ``created_at`` if the rows are unchanged."""
    if conn.execute(q.LOCK_ACTIVE_PARTITION, params).fetchone() is None:
        return None  # topic deleted or being deleted
    rows = conn.execute(q.SELECT_BLOCKS_IN_RANGE, params).fetchall()
    found = [BlockRow(*(row[name] for name in BlockRow.__slots__)) for row in rows]
    if found != list(run.blocks):
        return None
    return max(row["created_at"] for row in rows)


def _replace(
    conn: psycopg.Connection[dict[str, Any]], result: Compacted, params: dict[str, Any]
) -> None:
    conn.execute(
        q.INSERT_OBJECT, {"object_key": result.object_key, "size_bytes": result.size_bytes}
    )
    conn.execute(q.RELEASE_OBJECTS, {"keys": result.run.source_keys})
    conn.execute(q.DELETE_BLOCKS_IN_RANGE, params)
    conn.execute(q.INSERT_BLOCK, {**params, "object_key": result.object_key})


# --- command line ----------------------------------------------------------------------------


def run_cli(args: argparse.Namespace) -> int:
    """Run once on a session built from the settings; print the report as one JSON line."""
    config = _overridden(settings.compaction(), args)
    database_url, store = settings.database().url, settings.object_store()
    grace_s = settings.orphan_grace_s()
    spark = build_session(APP_NAME)
    try:
        report = run(spark, database_url, store, config, grace_s, args.topic_id or None)
    finally:
        spark.stop()
    print(json.dumps(report.as_dict()), flush=True)
    return 0


def _overridden(config: CompactionSettings, args: argparse.Namespace) -> CompactionSettings:
    """The settings, with what the command line gave instead."""
    return CompactionSettings(
        min_age_s=config.min_age_s if args.min_age_s is None else args.min_age_s,
        small_object_bytes=config.small_object_bytes
        if args.small_object_bytes is None
        else args.small_object_bytes,
        target_bytes=config.target_bytes if args.target_bytes is None else args.target_bytes,
        max_blocks=config.max_blocks,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m spark_pipelines.compaction [--min-age-s N] [--topic-id ID …]``."""
    parser = argparse.ArgumentParser(prog="compaction", description=__doc__.splitlines()[0])
    add_compaction_arguments(parser)
    try:
        return run_cli(parser.parse_args(argv))
    except SettingsError as exc:
        print(f"compaction: configuration error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
