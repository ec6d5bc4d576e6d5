"""Delivery to consumer-group members: leases, acks, nacks with backoff, dead letters, offsets.

A member receives messages only from partitions it owns, in offset order per partition, at most
``maxInFlight`` unacknowledged at a time. Each delivery is a lease with its own ``ackId``; when
it expires or is nacked the message is delivered again with ``attempt + 1`` (a new ``ackId``),
to whichever member owns the partition then. On an exactly-once topic only the current,
unexpired lease can be acked; on an at-least-once topic a late ack is accepted until the
message is delivered again. The committed offset is the lowest offset not yet done (acked or
dead-lettered); it only moves forward, except by an explicit seek or reset.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from data_plane import group_queries as q
from data_plane.groups import GroupHasActiveMembers, GroupNotFound, MemberNotFound, sweep, topic_of
from data_plane.reader import SegmentReader
from data_plane.segment import Message
from infra.errors import Conflict, ValidationFailed
from tenants.ids import new_id, random_base62

Conn = AsyncConnection[DictRow]


class AckRejected(Conflict):
    """The ack id's lease is over: the message may be (or have been) delivered again."""

    code = "ACK_REJECTED"


@dataclass(frozen=True, slots=True)
class Delivery:
    """One leased message."""

    partition: int
    offset: int
    attempt: int
    ack_id: str
    message: Message


@dataclass(frozen=True, slots=True)
class AckOutcome:
    """What happened to each ack id of a request."""

    done: list[str]
    rejected: list[dict[str, str]]


@dataclass(frozen=True, slots=True)
class GroupRef:
    """The ids and settings delivery needs, read once per request."""

    id: str
    name: str
    topic_id: str
    topic: str
    exactly_once: bool
    ack_timeout_s: float
    max_in_flight: int
    max_retries: int
    retry_delay_ms: int


def _ack_id() -> str:
    return "ack_" + random_base62(24)


async def group_ref(conn: Conn, environment_id: str, topic: str, group: str) -> GroupRef:
    """The group of a topic in this environment, or a 404."""
    topic_row = await topic_of(conn, environment_id, topic)
    row = await (
        await conn.execute(
            q.SELECT_GROUP_FOR_DELIVERY, {"topic_id": topic_row["id"], "name": group}
        )
    ).fetchone()
    if row is None:
        raise GroupNotFound(group)
    return GroupRef(
        id=row["id"],
        name=row["name"],
        topic_id=topic_row["id"],
        topic=topic_row["name"],
        exactly_once=row["delivery"] == "exactly-once",
        ack_timeout_s=row["ack_timeout_ms"] / 1000,
        max_in_flight=row["max_in_flight"],
        max_retries=row["max_retries"],
        retry_delay_ms=row["retry_delay_ms"],
    )


async def pull(
    conn: Conn, reader: SegmentReader, ref: GroupRef, member_id: str, max_messages: int
) -> list[Delivery]:
    """Lease up to ``max_messages`` messages to a member; commit the transaction to make it so."""
    if (
        await (
            await conn.execute(q.MEMBER_EXISTS, {"id": member_id, "group_id": ref.id})
        ).fetchone()
        is None
    ):
        raise MemberNotFound(member_id)
    owned = await (
        await conn.execute(
            q.LOCK_OWNED_PARTITIONS,
            {"topic_id": ref.topic_id, "group_id": ref.id, "member_id": member_id},
        )
    ).fetchall()
    in_flight = await (
        await conn.execute(q.COUNT_IN_FLIGHT, {"group_id": ref.id, "member_id": member_id})
    ).fetchone()
    budget = min(max_messages, ref.max_in_flight - (in_flight["n"] if in_flight else 0))
    deliveries: list[Delivery] = []
    for row in owned:
        if budget - len(deliveries) <= 0:
            break
        deliveries += await _redeliver(
            conn, reader, ref, member_id, row["partition"], budget - len(deliveries)
        )
        if budget - len(deliveries) > 0 and row["delivered_offset"] < row["next_offset"]:
            deliveries += await _deliver_new(
                conn, reader, ref, member_id, row, budget - len(deliveries)
            )
    return deliveries


async def _message_at(
    conn: Conn, reader: SegmentReader, ref: GroupRef, partition: int, offset: int
) -> Message | None:
    result = await reader.read(conn, ref.topic_id, partition, offset, 1)
    return (
        result.messages[0].message
        if result.messages and result.messages[0].offset == offset
        else None
    )


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
        message = await _message_at(conn, reader, ref, partition, row["offset"])
        expired_lease = row["state"] == "leased"
        if message is None or (expired_lease and row["attempt"] > ref.max_retries):
            reason = "ack timeout expired" if expired_lease else (row["last_error"] or "")
            await _dead_letter(conn, ref, partition, row, message, reason)
            continue
        ack_id = _ack_id()
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
        await _commit_progress(conn, ref.id, partition)
    return deliveries


async def _deliver_new(
    conn: Conn,
    reader: SegmentReader,
    ref: GroupRef,
    member_id: str,
    row: dict[str, Any],
    limit: int,
) -> list[Delivery]:
    partition = row["partition"]
    result = await reader.read(
        conn,
        ref.topic_id,
        partition,
        row["delivered_offset"],
        min(limit, row["next_offset"] - row["delivered_offset"]),
    )
    if not result.messages:
        return []
    ack_ids = [_ack_id() for _ in result.messages]
    offsets = [stored.offset for stored in result.messages]
    params = {
        "group_id": ref.id,
        "partition": partition,
        "member_id": member_id,
        "ack_timeout_s": ref.ack_timeout_s,
        "offsets": offsets,
        "ack_ids": ack_ids,
    }
    await conn.execute(q.INSERT_LEASES, params)
    await conn.execute(
        q.ADVANCE_DELIVERED,
        {"group_id": ref.id, "partition": partition, "delivered": offsets[-1] + 1},
    )
    return [
        Delivery(partition, stored.offset, 1, ack_id, stored.message)
        for stored, ack_id in zip(result.messages, ack_ids, strict=True)
    ]


async def _dead_letter(
    conn: Conn,
    ref: GroupRef,
    partition: int,
    row: dict[str, Any],
    message: Message | None,
    error: str,
) -> None:
    """Copy the message to the dead-letter store; it then counts as done."""
    if message is not None:
        params = {
            "id": new_id("dlq"),
            "group_id": ref.id,
            "partition": partition,
            "offset": row["offset"],
            "key": message.key,
            "headers": Jsonb(message.headers),
            "value": message.value,
            "published_at_ms": message.timestamp_ms,
            "error": error,
            "attempts": row["attempt"],
            "first_delivered_at": row["first_delivered_at"],
        }
        await conn.execute(q.INSERT_DEAD_LETTER, params)
    await conn.execute(
        q.MARK_DEAD,
        {"group_id": ref.id, "partition": partition, "offset": row["offset"], "error": error},
    )


async def _commit_progress(conn: Conn, group_id: str, partition: int) -> int:
    """Move the committed offset up to the lowest offset not yet done, and forget what is below."""
    gp = await (
        await conn.execute(q.LOCK_GROUP_PARTITION, {"group_id": group_id, "partition": partition})
    ).fetchone()
    assert gp is not None
    lowest = await (
        await conn.execute(q.LOWEST_OPEN_OFFSET, {"group_id": group_id, "partition": partition})
    ).fetchone()
    committed = (
        lowest["lowest"] if lowest and lowest["lowest"] is not None else gp["delivered_offset"]
    )
    row = await (
        await conn.execute(
            q.COMMIT_OFFSET, {"group_id": group_id, "partition": partition, "committed": committed}
        )
    ).fetchone()
    assert row is not None
    await conn.execute(
        q.FORGET_DONE,
        {"group_id": group_id, "partition": partition, "committed": row["committed_offset"]},
    )
    return int(row["committed_offset"])


async def _locked_lease(conn: Conn, ref: GroupRef, ack_id: str) -> dict[str, Any] | None:
    """The delivery row of ``ack_id`` with its partition locked first (the order pulls use)."""
    found = await (
        await conn.execute(q.SELECT_BY_ACK_IDS, {"group_id": ref.id, "ack_ids": [ack_id]})
    ).fetchone()
    if found is None:
        return None
    await conn.execute(
        q.LOCK_GROUP_PARTITION, {"group_id": ref.id, "partition": found["partition"]}
    )
    row = await (
        await conn.execute(q.LOCK_DELIVERY_BY_ACK, {"group_id": ref.id, "ack_id": ack_id})
    ).fetchone()
    return dict(row) if row else None


def _refusal(ref: GroupRef, row: dict[str, Any] | None) -> str | None:
    """Why this lease cannot be settled now, or None."""
    if row is None:
        return "unknown or superseded ackId: the message was delivered again or its ack id is wrong"
    if row["state"] != "leased":
        return None if row["state"] == "acked" else "the lease ended (nacked or dead-lettered)"
    if row["expired"] and ref.exactly_once:
        return "the lease expired: the message will be delivered again, so its work may be repeated"
    return None


async def ack(conn: Conn, ref: GroupRef, ack_ids: list[str]) -> AckOutcome:
    """Settle leases as done, set-based; each id is judged on its own.

    Partition rows are locked in partition order before any delivery row, the order pulls use,
    so an ack spanning partitions cannot deadlock with a pull.
    """
    wanted = sorted(set(ack_ids))
    rows = {row["ack_id"]: row for row in await _lock_partitions_of(conn, ref, wanted)}
    acked = await (
        await conn.execute(
            q.ACK_LEASES, {"group_id": ref.id, "ack_ids": wanted, "strict": ref.exactly_once}
        )
    ).fetchall()
    for partition in sorted({row["partition"] for row in acked}):
        await _commit_progress(conn, ref.id, partition)
    now_done = {row["ack_id"] for row in acked}
    done = [a for a in wanted if a in now_done or (a in rows and rows[a]["state"] == "acked")]
    rejected = [
        {"ackId": a, "reason": _refusal(ref, rows.get(a)) or "the lease ended"}
        for a in wanted
        if a not in done
    ]
    return AckOutcome(done, rejected)


async def _lock_partitions_of(
    conn: Conn, ref: GroupRef, ack_ids: list[str]
) -> list[dict[str, Any]]:
    """The leases of these ack ids, after locking their partitions in partition order (as pulls do)."""
    found = await (
        await conn.execute(q.SELECT_LEASES_BY_ACK_IDS, {"group_id": ref.id, "ack_ids": ack_ids})
    ).fetchall()
    partitions = sorted({row["partition"] for row in found})
    if partitions:
        await conn.execute(q.LOCK_GROUP_PARTITIONS, {"group_id": ref.id, "partitions": partitions})
    return [dict(row) for row in found]


def backoff_ms(base_ms: int, attempt: int) -> int:
    """``retryDelay · 2^(attempt-1)``."""
    return base_ms * 2 ** max(attempt - 1, 0)


async def nack(
    conn: Conn,
    reader: SegmentReader,
    ref: GroupRef,
    ack_id: str,
    error: str,
    retry_delay_ms: int | None = None,
) -> dict[str, Any]:
    """Schedule a retry with exponential backoff, or dead-letter after ``maxRetries``."""
    row = await _locked_lease(conn, ref, ack_id)
    reason = _refusal(ref, row)
    if reason or row is None or row["state"] != "leased":
        raise AckRejected(reason or "the message was already acked", ack_id=ack_id)
    if row["attempt"] > ref.max_retries:
        message = await _message_at(conn, reader, ref, row["partition"], row["offset"])
        await _dead_letter(conn, ref, row["partition"], row, message, error)
        await _commit_progress(conn, ref.id, row["partition"])
        return {"ackId": ack_id, "deadLettered": True, "retryInMs": None}
    delay_ms = backoff_ms(
        ref.retry_delay_ms if retry_delay_ms is None else retry_delay_ms, row["attempt"]
    )
    await conn.execute(
        q.MARK_RETRY,
        {
            "group_id": ref.id,
            "partition": row["partition"],
            "offset": row["offset"],
            "error": error,
            "delay_s": delay_ms / 1000,
        },
    )
    if delay_ms == 0:
        await wake(conn, ref.topic_id, row["partition"])
    return {"ackId": ack_id, "deadLettered": False, "retryInMs": delay_ms}


async def extend(conn: Conn, ref: GroupRef, ack_ids: list[str], seconds: int) -> list[str]:
    """Push the end of current, unexpired leases ``seconds`` from now."""
    if not 1 <= seconds <= 43_200:
        raise ValidationFailed("seconds must be between 1 and 43200", field="seconds")
    await _lock_partitions_of(conn, ref, ack_ids)
    rows = await (
        await conn.execute(
            q.EXTEND_LEASE, {"group_id": ref.id, "ack_ids": ack_ids, "seconds": seconds}
        )
    ).fetchall()
    return [row["ack_id"] for row in rows]


async def wake(conn: Conn, topic_id: str, partition: int) -> None:
    """Wake waiting consumers of a topic (same channel and shape as the writer's notifications)."""
    await conn.execute(q.WAKE_CONSUMERS, {"payload": json.dumps([[topic_id, partition, -1]])})


async def next_wakeup(conn: Conn, ref: GroupRef, member_id: str) -> datetime | None:
    """When the member's next lease expires or retry becomes due."""
    row = await (
        await conn.execute(q.NEXT_WAKEUP, {"group_id": ref.id, "member_id": member_id})
    ).fetchone()
    return row["at"] if row else None


async def offsets(conn: Conn, ref: GroupRef, partition: int | None) -> list[dict[str, int]]:
    """``{partition, current, latest, lag}`` per partition."""
    rows = await (
        await conn.execute(
            q.SELECT_OFFSETS, {"group_id": ref.id, "topic_id": ref.topic_id, "partition": partition}
        )
    ).fetchall()
    if partition is not None and not rows:
        raise ValidationFailed(
            f"partition {partition} does not exist on this topic", field="partition"
        )
    return [
        {
            "partition": r["partition"],
            "current": r["committed_offset"],
            "latest": r["next_offset"],
            "lag": max(r["next_offset"] - r["committed_offset"], 0),
        }
        for r in rows
    ]


async def seek(conn: Conn, ref: GroupRef, partition: int, offset: int) -> dict[str, int]:
    """Deliver ``partition`` from ``offset`` on; in-flight leases of it are dropped."""
    bounds = await offsets(conn, ref, partition)
    row = await (
        await conn.execute(
            q.SELECT_OFFSETS, {"group_id": ref.id, "topic_id": ref.topic_id, "partition": partition}
        )
    ).fetchone()
    assert row is not None
    if not row["start_offset"] <= offset <= row["next_offset"]:
        raise ValidationFailed(
            f"offset must be between {row['start_offset']} and {row['next_offset']}", field="offset"
        )
    await conn.execute(q.LOCK_GROUP_PARTITION, {"group_id": ref.id, "partition": partition})
    await conn.execute(q.FORGET_PARTITION_DELIVERIES, {"group_id": ref.id, "partition": partition})
    await conn.execute(
        q.SEEK_PARTITION, {"group_id": ref.id, "partition": partition, "offset": offset}
    )
    await wake(conn, ref.topic_id, partition)
    return {**bounds[0], "current": offset, "lag": max(bounds[0]["latest"] - offset, 0)}


async def reset(
    conn: Conn, environment_id: str, ref: GroupRef, to: str | int
) -> list[dict[str, int]]:
    """Move every partition to ``earliest``, ``latest`` or an offset; refused while members are active."""
    await sweep(conn, environment_id, ref.topic, ref.name)
    members = await (await conn.execute(q.COUNT_MEMBERS, {"group_id": ref.id})).fetchone()
    if members and members["n"]:
        raise GroupHasActiveMembers(
            f"The group has {members['n']} active consumer(s); stop them before resetting offsets.",
            consumers=members["n"],
        )
    for row in await (
        await conn.execute(
            q.SELECT_OFFSETS, {"group_id": ref.id, "topic_id": ref.topic_id, "partition": None}
        )
    ).fetchall():
        target = (
            row["start_offset"]
            if to == "earliest"
            else row["next_offset"]
            if to == "latest"
            else int(to)
        )
        await seek(
            conn, ref, row["partition"], min(max(target, row["start_offset"]), row["next_offset"])
        )
    return await offsets(conn, ref, None)
