"""Writing topics and committed blocks straight into PostgreSQL and S3, without the writer.

The read-path and cleanup tests build their data with the real codec, the real bucket and plain
SQL, as the group-commit writer does (one object per flush, offsets reserved under the partition
row lock, one index row per block), so they do not depend on the publish endpoints.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from core import settings
from core.db import connect
from core.object_store import ObjectStore, S3ObjectStore
from data_plane.write.segment import Message, encode_segment
from tests.support.tenancy import new_organisation

SEGMENTS_PREFIX = "segments/"


@dataclass(frozen=True)
class SeededTopic:
    """A topic created by SQL, with the key of its environment."""

    id: str
    name: str
    environment_id: str
    secret: str
    partitions: int


def object_store() -> ObjectStore:
    """The session's real bucket."""
    return S3ObjectStore.from_settings(settings.object_store())


def seed_topic(
    database_url: str,
    name: str,
    partitions: int = 2,
    retention_s: int = 7 * 86_400,
    environment: str = "production",
) -> SeededTopic:
    """A new organisation and an active topic in its ``environment``."""
    org = new_organisation(database_url)
    env = org.project.environment(environment)
    topic_id = f"top_{secrets.token_hex(8)}"
    with connect(database_url) as conn:
        conn.execute(
            "INSERT INTO topics (id, organisation_id, environment_id, name, partitions,"
            " retention_s, delivery) VALUES (%s, %s, %s, %s, %s, %s, 'exactly-once')",
            (topic_id, org.organisation.id, env.id, name, partitions, retention_s),
        )
        conn.execute(
            "INSERT INTO partitions (topic_id, partition) SELECT %s, generate_series(0, %s - 1)",
            (topic_id, partitions),
        )
    return SeededTopic(topic_id, name, env.id, org.keys[environment].secret, partitions)


def messages(count: int, tag: str = "m", timestamp_ms: int | None = None) -> list[Message]:
    """``count`` JSON messages ``{"tag": tag, "n": i}`` with key ``k{i}`` and one header."""
    now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    return [
        Message(
            key=f"k{i}".encode(),
            headers={"h": f"{tag}-{i}"},
            value=json.dumps({"tag": tag, "n": i}).encode(),
            timestamp_ms=now + i,
        )
        for i in range(count)
    ]


def commit_segment(
    database_url: str,
    objects: ObjectStore,
    blocks: Mapping[tuple[str, int], Sequence[Message]],
) -> str:
    """PUT one segment object and commit its blocks at the partitions' next offsets; its key."""
    data, refs = encode_segment(blocks)
    key = f"{SEGMENTS_PREFIX}{secrets.token_hex(12)}.seg"
    objects.put(key, data)
    with connect(database_url) as conn, conn.transaction():
        conn.execute(
            "INSERT INTO segment_objects (object_key, size_bytes, block_count) VALUES (%s, %s, %s)",
            (key, len(data), len(refs)),
        )
        for ref in refs:
            row = conn.execute(
                "UPDATE partitions SET next_offset = next_offset + %s"
                " WHERE topic_id = %s AND partition = %s RETURNING next_offset - %s AS base",
                (ref.count, ref.topic_id, ref.partition, ref.count),
            ).fetchone()
            assert row is not None
            conn.execute(
                "INSERT INTO segment_blocks (topic_id, partition, base_offset, count, object_key,"
                " byte_offset, byte_length, min_timestamp_ms, max_timestamp_ms)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    ref.topic_id,
                    ref.partition,
                    row["base"],
                    ref.count,
                    key,
                    ref.offset,
                    ref.length,
                    ref.min_timestamp_ms,
                    ref.max_timestamp_ms,
                ),
            )
    return key


def count_rows(database_url: str, table: str, column: str, value: str) -> int:
    """Rows of ``table`` whose ``column`` equals ``value``."""
    with connect(database_url) as conn:
        row = conn.execute(f"SELECT count(*) AS n FROM {table} WHERE {column} = %s", (value,))
        result = row.fetchone()
        assert result is not None
        return int(result["n"])


def exists(objects: ObjectStore, key: str) -> bool:
    """Whether ``key`` is in the bucket."""
    return key in objects.list_keys(key)
