"""Deleting what is no longer needed: deleted topics, expired messages, orphaned objects.

Run by Celery tasks (``data_plane.tasks``) but written as async services on a psycopg connection,
like every other domain service. Each function needs an **autocommit** connection: it commits
its PostgreSQL changes in short transactions of its own *before* it deletes objects from S3, so a
crash between the two leaves objects with no ``segment_objects`` row, which
:func:`collect_orphans` deletes later, and never an index row pointing at a deleted object.
Running any of them twice leaves the same state as running it once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from core.db import Conn
from core.object_store import ListedObject, ObjectStore
from core.settings import DEFAULT_ORPHAN_GRACE_S
from data_plane.delivery import queries as delivery_queries
from data_plane.maintenance import queries as q
from observability.logging import get_logger

log = get_logger("queuecore.cleanup")

SEGMENTS_PREFIX = "segments/"
FULL_LISTING_EVERY = timedelta(days=1)
ORPHAN_CURSOR = "orphan_gc"
_HOUR = timedelta(hours=1)
_KEYS_PER_QUERY = 1000


class ListsObjects(Protocol):
    """A store that can list keys with their modification times."""

    def list_objects(self, prefix: str = "") -> list[ListedObject]:
        """Every object under ``prefix`` with its age."""


def list_objects(objects: ObjectStore, prefix: str = "") -> list[ListedObject]:
    """Keys under ``prefix`` with S3's ``LastModified`` (the grace period needs their age)."""
    lister = getattr(objects, "list_objects", None)
    if lister is None:
        raise TypeError(f"{type(objects).__name__} cannot list objects with their ages")
    return list(lister(prefix))


@dataclass(frozen=True, slots=True)
class CleanupReport:
    """What one run removed."""

    topics_deleted: int = 0
    partitions_trimmed: int = 0
    objects_deleted: int = 0
    index_rows_deleted: int = 0

    def as_dict(self) -> dict[str, int]:
        """JSON-friendly (a Celery task result)."""
        return {
            "topicsDeleted": self.topics_deleted,
            "partitionsTrimmed": self.partitions_trimmed,
            "objectsDeleted": self.objects_deleted,
            "indexRowsDeleted": self.index_rows_deleted,
        }


def _require_autocommit(conn: Conn) -> None:
    if not conn.autocommit:
        raise ValueError("cleanup services commit step by step: pass an autocommit connection")


async def _delete_objects(objects: ObjectStore, keys: list[str]) -> None:
    if keys:
        await asyncio.to_thread(objects.delete, sorted(keys))


async def _release_objects(conn: Conn, objects: ObjectStore, keys: Iterable[str]) -> int:
    """Forget, then delete, those of ``keys`` that no block references any more."""
    candidates = sorted(set(keys))
    released: list[str] = []
    for first in range(0, len(candidates), _KEYS_PER_QUERY):
        chunk = candidates[first : first + _KEYS_PER_QUERY]
        cur = await conn.execute(q.DELETE_UNREFERENCED_OBJECTS, {"keys": chunk})
        released += [row["object_key"] for row in await cur.fetchall()]
    await _delete_objects(objects, released)
    return len(released)


# --- topic deletion ----------------------------------------------------------------------------


async def delete_topic_data(
    conn: Conn, objects: ObjectStore, topic_id: str | None = None
) -> CleanupReport:
    """Remove every topic in ``deleting`` status (or just ``topic_id``) with its data."""
    _require_autocommit(conn)
    if topic_id is None:
        cur = await conn.execute(q.LIST_DELETING_TOPICS)
        topic_ids = [row["id"] for row in await cur.fetchall()]
    else:
        topic_ids = [topic_id]
    topics = objects_deleted = rows_deleted = 0
    for one in topic_ids:
        deleted, dropped = await _delete_topic_rows(conn, one)
        topics += deleted
        rows_deleted += sum(dropped.values())
        objects_deleted += await _release_objects(conn, objects, dropped)
    return CleanupReport(
        topics_deleted=topics, objects_deleted=objects_deleted, index_rows_deleted=rows_deleted
    )


async def _delete_topic_rows(conn: Conn, topic_id: str) -> tuple[int, dict[str, int]]:
    """In one transaction: the topic's blocks, idempotency keys, partitions and row."""
    params = {"topic_id": topic_id}
    async with conn.transaction():
        await conn.execute(q.LOCK_TOPIC_PARTITIONS, params)
        cur = await conn.execute(q.LOCK_DELETING_TOPIC, params)
        if await cur.fetchone() is None:
            return 0, {}  # already gone, or active again: nothing to do
        cur = await conn.execute(q.DELETE_TOPIC_BLOCKS, params)
        dropped = {row["object_key"]: row["blocks"] for row in await cur.fetchall()}
        await conn.execute(q.DELETE_TOPIC_IDEMPOTENCY_KEYS, params)
        await conn.execute(q.DELETE_TOPIC_PARTITIONS, params)
        await conn.execute(q.DELETE_TOPIC, params)
    return 1, dropped


# --- orphans -------------------------------------------------------------------------------------


async def collect_orphans(
    conn: Conn,
    objects: ObjectStore,
    grace_s: int = DEFAULT_ORPHAN_GRACE_S,
    prefix: str = SEGMENTS_PREFIX,
    now: datetime | None = None,
) -> CleanupReport:
    """Delete objects older than ``grace_s`` that are not committed or no longer referenced.

    An object PUT by a writer whose commit failed (or is still in flight) has no
    ``segment_objects`` row; the grace period keeps in-flight flushes safe. Keys name the hour
    they were written in (:func:`data_plane.write.writer.segment_key`), so a run lists only the hours
    from the stored cursor (``maintenance_cursors``) to the cutoff's, and the whole prefix once
    a day (:data:`FULL_LISTING_EVERY`) for keys laid out otherwise.
    """
    _require_autocommit(conn)
    now = now or datetime.now(UTC)
    cutoff = now - timedelta(seconds=grace_s)
    cursor = await _orphan_cursor(conn) if prefix == SEGMENTS_PREFIX else None
    full = cursor is None or cursor["full_at"] < now - FULL_LISTING_EVERY
    prefixes = (
        [prefix] if full or cursor is None else _hour_prefixes(cursor["done_through"], cutoff)
    )
    listed: list[ListedObject] = []
    for one in prefixes:
        listed += await asyncio.to_thread(list_objects, objects, one)
    old = [item.key for item in listed if item.last_modified < cutoff]
    committed: set[str] = set()
    for first in range(0, len(old), _KEYS_PER_QUERY):
        cur = await conn.execute(
            q.SELECT_COMMITTED_OBJECTS, {"keys": old[first : first + _KEYS_PER_QUERY]}
        )
        committed.update(row["object_key"] for row in await cur.fetchall())
    uncommitted = [key for key in old if key not in committed]
    await _delete_objects(objects, uncommitted)
    cur = await conn.execute(q.DELETE_EMPTY_OBJECTS, {"grace_s": grace_s})
    empty = [row["object_key"] for row in await cur.fetchall()]
    await _delete_objects(objects, empty)
    if prefix == SEGMENTS_PREFIX:
        done_through = _hour_of(cutoff)  # every hour before the cutoff's is checked now
        full_at = now if full else cursor["full_at"] if cursor else now
        await conn.execute(
            q.SAVE_GC_CURSOR,
            {"name": ORPHAN_CURSOR, "done_through": done_through, "full_at": full_at},
        )
    log.info("orphans_collected", prefixes=len(prefixes), listed=len(listed), full=full)
    return CleanupReport(objects_deleted=len(uncommitted) + len(empty))


async def _orphan_cursor(conn: Conn) -> dict[str, Any] | None:
    cur = await conn.execute(q.SELECT_GC_CURSOR, {"name": ORPHAN_CURSOR})
    return await cur.fetchone()


def _hour_of(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _hour_prefixes(done_through: datetime, cutoff: datetime) -> list[str]:
    """``segments/yyyy/mm/dd/hh/`` of each hour from ``done_through`` to the cutoff's hour."""
    hour, last = _hour_of(done_through), _hour_of(cutoff)
    prefixes = []
    while hour <= last:
        prefixes.append(f"{SEGMENTS_PREFIX}{hour:%Y/%m/%d/%H}/")
        hour += _HOUR
    return prefixes


# --- retention -----------------------------------------------------------------------------------


async def apply_retention(conn: Conn, objects: ObjectStore) -> CleanupReport:
    """Drop the blocks past each topic's retention from the start of every partition.

    Only a prefix of a partition is dropped (up to the first block still inside retention), so
    the retained offsets stay contiguous and ``start_offset`` only moves forward.
    """
    _require_autocommit(conn)
    cur = await conn.execute(q.SELECT_RETENTION_CANDIDATES)
    candidates = await cur.fetchall()
    trimmed = rows_deleted = objects_deleted = 0
    for row in candidates:
        dropped = await _trim_partition(conn, row["topic_id"], row["partition"], row["retention_s"])
        trimmed += 1 if dropped else 0
        rows_deleted += sum(dropped.values())
        objects_deleted += await _release_objects(conn, objects, dropped)
    await conn.execute(q.DELETE_EXPIRED_IDEMPOTENCY_KEYS)
    return CleanupReport(
        partitions_trimmed=trimmed, objects_deleted=objects_deleted, index_rows_deleted=rows_deleted
    )


async def _trim_partition(
    conn: Conn, topic_id: str, partition: int, retention_s: int
) -> dict[str, int]:
    """One partition, under its row lock (the writer's sequencer lock): drop, advance start."""
    params: dict[str, Any] = {"topic_id": topic_id, "partition": partition}
    async with conn.transaction():
        cur = await conn.execute(q.LOCK_PARTITION, params)
        bounds = await cur.fetchone()
        if bounds is None:
            return {}
        cur = await conn.execute(
            q.SELECT_FIRST_RETAINED_BLOCK, {**params, "retention_s": retention_s}
        )
        first = await cur.fetchone()
        retained = first["base_offset"] if first and first["base_offset"] is not None else None
        params["start_offset"] = bounds["next_offset"] if retained is None else retained
        cur = await conn.execute(q.DELETE_BLOCKS_BEFORE, params)
        dropped = {row["object_key"]: row["blocks"] for row in await cur.fetchall()}
        await conn.execute(q.ADVANCE_START_OFFSET, params)
        await _skip_dropped_offsets(conn, params)
    return dropped


async def _skip_dropped_offsets(conn: Conn, params: dict[str, Any]) -> None:
    """Move groups that had not delivered the dropped offsets to the first one retained.

    A stopped or slow consumer would otherwise ask for offsets that no longer exist on every
    pull. Offsets it had already leased end as usual: one that expires is dead-lettered, since
    its message is gone (``data_plane.delivery.store.messages_at``).
    """
    cur = await conn.execute(q.SKIP_DROPPED_OFFSETS, params)
    for row in await cur.fetchall():
        progress = {"group_id": row["group_id"], "partitions": [params["partition"]]}
        await conn.execute(delivery_queries.COMMIT_PROGRESS, progress)
        log.info("group_skipped_dropped_offsets", group_id=row["group_id"], **params)
