"""Pulls: due redeliveries first, then fresh offsets leased as one range per partition.

The common pull, with no redelivery due on the member's partitions, is ONE statement in
autocommit mode (``qc_pull_v2``, data_plane/delivery/functions/qc_pull_v2.sql): one round trip to PostgreSQL, its commit included,
and the messages are read after it. A pull with redeliveries due is one transaction as before:
the state, the redeliveries and fresh offsets planned and read here, the leases with the commit.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime
from itertools import repeat
from typing import Any

import psycopg
from psycopg import AsyncCursor
from psycopg.rows import DictRow

from core.db import autocommit
from data_plane.delivery import queries as q
from data_plane.delivery.leases import new_lease_id, range_ack_ids
from data_plane.delivery.model import Conn, Delivery, FairGroup, GroupRef, Pulled
from data_plane.delivery.store import (
    commit_progress,
    dead_letter_many,
    expire_ranges,
    messages_at,
    new_ack_id,
)
from data_plane.groups.service import GroupTopicNotFound, MemberNotFound
from data_plane.read.reader import BlockRow, SegmentReader
from data_plane.write.segment import Message
from observability import metrics
from observability.logging import get_logger

log = get_logger("queuecore.delivery")

# Which of a partition's redeliveries may go now (the others are postponed by it).
Admit = Callable[[Conn, GroupRef, list[Delivery]], Awaitable[list[Delivery]]]


async def pull(
    conn: Conn,
    reader: SegmentReader,
    ref: GroupRef,
    member_id: str,
    max_messages: int,
    owned: int | None = None,
) -> Pulled:
    """Lease up to ``max_messages`` messages to a member, and commit (see :func:`_pull`)."""
    pulled = await _pull(conn, reader, ref, member_id, max_messages, owned)
    if pulled.deliveries:  # one record per pull, the batch's size as its value
        metrics.MESSAGES_DELIVERED.add(
            len(pulled.deliveries), metrics.delivery_attributes(ref.exactly_once)
        )
    return pulled


async def _pull(
    conn: Conn,
    reader: SegmentReader,
    ref: GroupRef,
    member_id: str,
    max_messages: int,
    owned: int | None = None,
) -> Pulled:
    """Lease up to ``max_messages`` messages to a member, and commit.

    One statement (``qc_pull_v2``, data_plane/delivery/functions/qc_pull_v2.sql) touches the member (with the group's current
    settings), locks its partitions in partition order, reads its in-flight count and due work,
    selects the index rows of the fresh offsets and, when none of its partitions has redelivery
    work due, leases those offsets, one range per partition, and commits: one round trip. The
    messages are read afterwards (:func:`_read_leased`). With redeliveries due it leases nothing
    and the pull runs as one transaction instead (:func:`_pull_in_transaction`). The commit
    waits for the WAL flush on every topic: a lease a crash forgot would hand its messages out
    again as attempt 1 (docs/decisions.md §11).

    ``owned`` is how many partitions the member owned at its previous pull, if known (else the
    topic's partition count is used): the statement gets that many lease ids, at most
    ``max_messages``, since each lease holds at least one message. A member that gained
    partitions since gets the rest in a second statement. A pull is its own transaction: what
    the caller left open on ``conn`` is committed first.
    """
    slots = min(max_messages, ref.partitions if owned is None else owned)
    started_s = time.perf_counter()
    async with autocommit(conn):
        lease_ids = [new_lease_id() for _ in range(slots)]
        with metrics.db_statement("pull"):
            found = await _found(
                await conn.execute(q.PULL, _pull_params(ref, member_id, max_messages, lease_ids))
            )
        leased_s = time.perf_counter()
        ref = _with_settings(ref, member_id, found["settings"])
        if found.get("fair"):
            raise FairGroup(ref.id)  # nothing was leased (data_plane/delivery/fair.py)
        leases = found["leases"]
        deliveries = [] if leases is None else await _read_leased(conn, reader, ref, found)
    if leases is None:
        return await _pull_in_transaction(conn, reader, ref, member_id, max_messages)
    pulled = _pulled(ref, found, deliveries, leased_s - started_s, time.perf_counter() - leased_s)
    if not found["starved"]:
        return pulled
    more = await _pull(
        conn, reader, ref, member_id, max_messages - len(deliveries), len(pulled.partitions)
    )
    return replace(
        more,
        deliveries=deliveries + more.deliveries,
        lease_s=pulled.lease_s + more.lease_s,
        read_s=pulled.read_s + more.read_s,
    )


def _pull_params(ref: GroupRef, member_id: str, limit: int, lease_ids: list[str]) -> dict[str, Any]:
    """The arguments of ``qc_pull_v2``."""
    return {
        "group_id": ref.id,
        "member_id": member_id,
        "topic_id": ref.topic_id,
        "limit": limit,
        "async_commit": False,  # leases are durable before a consumer sees them (§11)
        "lease_ids": lease_ids,
    }


async def _found(cursor: AsyncCursor[DictRow]) -> dict[str, Any]:
    """``qc_pull_v2``'s result (see data_plane/delivery/functions/qc_pull_v2.sql for its shape)."""
    row = await cursor.fetchone()
    assert row is not None
    found: dict[str, Any] = row["pulled"]
    return found


def _with_settings(ref: GroupRef, member_id: str, settings: dict[str, Any] | None) -> GroupRef:
    """``ref`` with the group's settings as the pull read them; a gone member or topic is an error."""
    if settings is None:
        raise MemberNotFound(member_id)
    if not settings["active"]:
        raise GroupTopicNotFound(ref.topic)
    return replace(
        ref,
        ack_timeout_s=settings["ack_timeout_ms"] / 1000,
        max_in_flight=settings["max_in_flight"],
        max_retries=settings["max_retries"],
        retry_delay_ms=settings["retry_delay_ms"],
    )


def _pulled(
    ref: GroupRef,
    found: dict[str, Any],
    deliveries: list[Delivery],
    lease_s: float = 0.0,
    read_s: float = 0.0,
) -> Pulled:
    """What the caller gets: the deliveries, what it needs to wait for more, and the times."""
    wakeup = found["state"]["wakeup"]
    in_flight = int(found["state"]["in_flight"]) + len(deliveries)
    return Pulled(
        ref,
        deliveries,
        frozenset(r["partition"] for r in found["owned"]),
        None if wakeup is None else datetime.fromisoformat(wakeup),
        found["settings"]["session_timeout_ms"],
        full=in_flight >= ref.max_in_flight,
        lease_s=lease_s,
        read_s=read_s,
    )


async def _read_leased(
    conn: Conn, reader: SegmentReader, ref: GroupRef, found: dict[str, Any]
) -> list[Delivery]:
    """The messages of the range leases ``qc_pull_v2`` made (and committed).

    The leases exist before their messages are read, so a read that fails, or comes back with
    fewer messages than its lease holds, must not leave the offsets leased to a consumer that
    never got them until the ack timeout: those leases are expired at once, and the next pull
    of their partitions hands them over and redelivers them through the usual expiry path
    (:func:`_redeliver`). That redelivery is ``attempt`` 2, as after any expiry (with
    ``maxRetries`` 0 it dead-letters them), and a message whose data is gone is dead-lettered.
    A failed read fails the pull, so every lease of the pull is expired, and the error raised.
    """
    blocks = _blocks_by_partition(found["blocks"])
    deliveries: list[Delivery] = []
    unread: list[list[Any]] = []
    try:
        for lease in found["leases"]:
            partition, lease_id, first, last = lease
            messages = await reader.read_blocks(
                conn, ref.topic_id, partition, blocks.get(partition, []), first, last + 1
            )
            if len(messages) == last - first + 1:
                deliveries += _range_deliveries(partition, lease_id, first, messages)
            else:
                unread.append(lease)
    except (Exception, asyncio.CancelledError):
        await _expire(conn, ref, found["leases"])
        raise
    if unread:
        await _expire(conn, ref, unread)
    return deliveries


async def _expire(conn: Conn, ref: GroupRef, leases: list[list[Any]]) -> None:
    """End these leases of the pull now. Should that fail too, they end at their ack timeout."""
    params = {
        "group_id": ref.id,
        "partitions": [lease[0] for lease in leases],
        "lease_ids": [lease[1] for lease in leases],
    }
    try:
        await conn.execute(q.EXPIRE_RANGE_LEASES, params)
    except psycopg.Error as exc:
        log.warning("pull_lease_expiry_failed", group_id=ref.id, error=type(exc).__name__)


async def _pull_in_transaction(
    conn: Conn, reader: SegmentReader, ref: GroupRef, member_id: str, max_messages: int
) -> Pulled:
    """The pull as one transaction, when redeliveries are due.

    ``qc_pull_v2`` with no lease ids (it leases nothing) goes with the transaction's ``BEGIN``;
    the redeliveries and fresh offsets are planned and read here (:func:`_take`); the range
    leases go with the ``COMMIT``. The partitions stay locked until the commit.
    """
    with metrics.db_statement("pull_in_transaction"):
        async with conn.pipeline():  # with the transaction's BEGIN: one round trip
            cursor = await conn.execute(q.PULL, _pull_params(ref, member_id, max_messages, []))
        found = await _found(cursor)
    ref = _with_settings(ref, member_id, found["settings"])
    if found.get("fair"):  # made fair since the statement before: nothing leased yet
        await conn.rollback()
        raise FairGroup(ref.id)
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
    return _pulled(ref, found, deliveries)


def _blocks_by_partition(rows: list[list[Any]]) -> dict[int, list[BlockRow]]:
    """``[partition, base_offset, count, object_key, byte_offset, byte_length]`` rows, by partition."""
    blocks: dict[int, list[BlockRow]] = {}
    for partition, *fields in rows:
        blocks.setdefault(partition, []).append(BlockRow(*fields))
    return blocks


def _range_deliveries(
    partition: int, lease_id: str, first: int, messages: list[Message]
) -> list[Delivery]:
    """The deliveries of a range lease: attempt 1, the range's ack ids in offset order."""
    fields = zip(
        repeat(partition),
        range(first, first + len(messages)),
        repeat(1),
        range_ack_ids(lease_id, len(messages)),
        messages,
        strict=False,
    )
    # tuple.__new__ builds each Delivery in C: this runs once per delivered message.
    return list(map(tuple.__new__, repeat(Delivery), fields))


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
        fresh[partition] = _range_deliveries(partition, lease_id, first, messages)
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
    conn: Conn,
    reader: SegmentReader,
    ref: GroupRef,
    member_id: str,
    partition: int,
    limit: int,
    admit: Admit | None = None,
) -> list[Delivery]:
    """Lease the partition's due redeliveries again, each with a new ackId and ``attempt + 1``
    (or dead-letter them): their messages read a run at a time, the leases in one statement.

    ``admit`` (a fair group's throttle) may hold some back: they wait, due again when a token
    is, without counting an attempt."""
    rows = await (
        await conn.execute(
            q.DUE_REDELIVERIES, {"group_id": ref.id, "partition": partition, "limit": limit}
        )
    ).fetchall()
    messages = await messages_at(conn, reader, ref, partition, [row["offset"] for row in rows])
    deliveries, dead = [], []
    for row in rows:
        message = messages.get(row["offset"])
        expired_lease = row["state"] == "leased"
        if message is None or (expired_lease and row["attempt"] > ref.max_retries):
            reason = "ack timeout expired" if expired_lease else (row["last_error"] or "")
            dead.append((row, message, reason))
            continue
        deliveries.append(
            Delivery(partition, row["offset"], row["attempt"] + 1, new_ack_id(), message)
        )
    await dead_letter_many(conn, ref, partition, dead)
    if admit is not None and deliveries:
        deliveries = await admit(conn, ref, deliveries)
    if dead:
        attributes = metrics.dead_letter_attributes(ref.exactly_once, "redelivery")
        metrics.MESSAGES_DEAD_LETTERED.add(len(dead), attributes)
    if deliveries:
        await conn.execute(q.LEASE_AGAIN_MANY, _lease_again_params(ref, member_id, deliveries))
    if rows:
        with metrics.db_statement("commit_progress"):
            await commit_progress(conn, ref.id, [partition])
    return deliveries


def _lease_again_params(
    ref: GroupRef, member_id: str, deliveries: list[Delivery]
) -> dict[str, Any]:
    """The arguments of ``LEASE_AGAIN_MANY`` for redeliveries of one partition."""
    return {
        "group_id": ref.id,
        "partition": deliveries[0].partition,
        "member_id": member_id,
        "ack_timeout_s": ref.ack_timeout_s,
        "offsets": [d.offset for d in deliveries],
        "attempts": [d.attempt for d in deliveries],
        "ack_ids": [d.ack_id for d in deliveries],
    }
