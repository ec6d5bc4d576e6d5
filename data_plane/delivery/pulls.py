"""Pulls: due redeliveries first, then fresh offsets leased as one range per partition."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from itertools import repeat
from typing import Any

from data_plane import group_queries as q
from data_plane.delivery.model import Conn, Delivery, GroupRef, Pulled
from data_plane.delivery.store import (
    commit_progress,
    dead_letter,
    expire_ranges,
    message_at,
    new_ack_id,
)
from data_plane.groups import GroupTopicNotFound, MemberNotFound
from data_plane.leases import new_lease_id, range_ack_ids
from data_plane.reader import BlockRow, SegmentReader


async def pull(
    conn: Conn, reader: SegmentReader, ref: GroupRef, member_id: str, max_messages: int
) -> Pulled:
    """Lease up to ``max_messages`` messages to a member, and commit.

    One statement (``qc_pull_state``, migration 0008) touches the member (with the group's
    current settings), locks its partitions in partition order, reads its in-flight count and
    due work, and selects the index rows of the fresh offsets; a second round trip records one
    range lease per partition and commits. On an at-least-once topic the commit does not wait
    for the WAL flush (docs/decisions.md §11): a lease lost in a database crash is only an early
    redelivery.
    """
    params = {
        "group_id": ref.id,
        "member_id": member_id,
        "topic_id": ref.topic_id,
        "limit": max_messages,
        "async_commit": not ref.exactly_once,
    }
    async with conn.pipeline():  # with the transaction's BEGIN: one round trip
        cursor = await conn.execute(q.PULL_STATE, params)
    row = await cursor.fetchone()
    assert row is not None
    found = row["pulled"]
    settings = found["settings"]
    if settings is None:
        raise MemberNotFound(member_id)
    if not settings["active"]:
        raise GroupTopicNotFound(ref.topic)
    ref = replace(
        ref,
        ack_timeout_s=settings["ack_timeout_ms"] / 1000,
        max_in_flight=settings["max_in_flight"],
        max_retries=settings["max_retries"],
        retry_delay_ms=settings["retry_delay_ms"],
    )
    owned, state = found["owned"], found["state"]
    blocks = _blocks_by_partition(found["blocks"])
    budget = min(max_messages, ref.max_in_flight - int(state["in_flight"]))
    deliveries, leases = await _take(
        conn, reader, ref, member_id, owned, set(state["due_partitions"]), budget, blocks
    )
    async with conn.pipeline():  # the range leases and the commit: one round trip
        if leases is not None:
            await conn.execute(q.INSERT_RANGE_LEASES, leases)
        await conn.commit()
    wakeup = state["wakeup"]
    return Pulled(
        ref,
        deliveries,
        frozenset(r["partition"] for r in owned),
        None if wakeup is None else datetime.fromisoformat(wakeup),
        settings["session_timeout_ms"],
    )


def _blocks_by_partition(rows: list[list[Any]]) -> dict[int, list[BlockRow]]:
    """``[partition, base_offset, count, object_key, byte_offset, byte_length]`` rows, by partition."""
    blocks: dict[int, list[BlockRow]] = {}
    for partition, *fields in rows:
        blocks.setdefault(partition, []).append(BlockRow(*fields))
    return blocks


async def _take(
    conn: Conn,
    reader: SegmentReader,
    ref: GroupRef,
    member_id: str,
    owned: list[dict[str, Any]],
    due: set[int],
    budget: int,
    blocks: dict[int, list[BlockRow]],
) -> tuple[list[Delivery], dict[str, Any] | None]:
    """Per partition in order: due redeliveries first, then fresh offsets, within ``budget``.

    Returns the deliveries and the parameters of the fresh offsets' range leases (to insert).
    """
    again: dict[int, list[Delivery]] = {}
    plan: list[tuple[int, int, int]] = []  # (partition, first offset, end offset)
    taken = 0
    for row in owned:
        partition = row["partition"]
        if budget - taken <= 0:
            break
        if partition in due:
            await expire_ranges(conn, ref, partition)
            again[partition] = await _redeliver(
                conn, reader, ref, member_id, partition, budget - taken
            )
            taken += len(again[partition])
        first, end = row["delivered_offset"], row["next_offset"]
        if budget - taken > 0 and first < end:
            end = min(end, first + budget - taken)
            plan.append((partition, first, end))
            taken += end - first
    fresh, leases = await _read_fresh(conn, reader, ref, member_id, plan, blocks)
    deliveries = [
        item
        for row in owned
        for item in again.get(row["partition"], []) + fresh.get(row["partition"], [])
    ]
    return deliveries, leases


async def _read_fresh(
    conn: Conn,
    reader: SegmentReader,
    ref: GroupRef,
    member_id: str,
    plan: list[tuple[int, int, int]],
    blocks: dict[int, list[BlockRow]],
) -> tuple[dict[int, list[Delivery]], dict[str, Any] | None]:
    """Read the planned offsets; the deliveries and their range leases, one per partition."""
    fresh: dict[int, list[Delivery]] = {}
    leases: dict[str, list[Any]] = {"partitions": [], "lease_ids": [], "first": [], "last": []}
    for partition, first, end in plan:
        messages = await reader.read_blocks(
            conn, ref.topic_id, partition, blocks.get(partition, []), first, end
        )
        if not messages:
            continue
        lease_id = new_lease_id()
        fields = zip(
            repeat(partition),
            range(first, first + len(messages)),
            repeat(1),
            range_ack_ids(lease_id, len(messages)),
            messages,
            strict=False,
        )
        # tuple.__new__ builds each Delivery in C: this runs once per delivered message.
        fresh[partition] = list(map(tuple.__new__, repeat(Delivery), fields))
        for key, value in zip(
            leases, (partition, lease_id, first, first + len(messages) - 1), strict=True
        ):
            leases[key].append(value)
    if not fresh:
        return fresh, None
    return fresh, {
        "group_id": ref.id,
        "member_id": member_id,
        "ack_timeout_s": ref.ack_timeout_s,
        "partitions": leases["partitions"],
        "lease_ids": leases["lease_ids"],
        "first_offsets": leases["first"],
        "last_offsets": leases["last"],
    }


async def _redeliver(
    conn: Conn, reader: SegmentReader, ref: GroupRef, member_id: str, partition: int, limit: int
) -> list[Delivery]:
    rows = await (
        await conn.execute(
            q.DUE_REDELIVERIES, {"group_id": ref.id, "partition": partition, "limit": limit}
        )
    ).fetchall()
    deliveries = []
    for row in rows:
        message = await message_at(conn, reader, ref, partition, row["offset"])
        expired_lease = row["state"] == "leased"
        if message is None or (expired_lease and row["attempt"] > ref.max_retries):
            reason = "ack timeout expired" if expired_lease else (row["last_error"] or "")
            await dead_letter(conn, ref, partition, row, message, reason)
            continue
        ack_id = new_ack_id()
        params = {
            "group_id": ref.id,
            "partition": partition,
            "offset": row["offset"],
            "attempt": row["attempt"] + 1,
            "ack_id": ack_id,
            "member_id": member_id,
            "ack_timeout_s": ref.ack_timeout_s,
        }
        await conn.execute(q.LEASE_AGAIN, params)
        deliveries.append(Delivery(partition, row["offset"], row["attempt"] + 1, ack_id, message))
    if rows:
        await commit_progress(conn, ref.id, [partition])
    return deliveries
