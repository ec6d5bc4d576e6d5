"""Delivery to consumer-group members: leases, acks, nacks with backoff, dead letters, offsets.

A member receives messages only from partitions it owns, in offset order per partition, at most
``maxInFlight`` unacknowledged at a time. Each delivery is a lease with its own ``ackId``; when
it expires or is nacked the message is delivered again with ``attempt + 1`` (a new ``ackId``),
to whichever member owns the partition then. On an exactly-once topic only the current,
unexpired lease can be acked; on an at-least-once topic a late ack is accepted until the
message is delivered again. The committed offset is the lowest offset not yet done (acked or
dead-lettered); it only moves forward, except by an explicit seek or reset.

Bookkeeping is per request, not per message (docs/consumer-groups.md): fresh offsets are leased
as ONE range row per partition and pull (``group_leases``, see :mod:`data_plane.leases`); acks
flip bits of those rows, set-based. Only what leaves a range — a nack, a partial extend, an
expiry — gets a per-message ``group_deliveries`` row, and the per-message rules (redelivery,
backoff, dead letters, stale-ack refusal) take over from there.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import repeat
from typing import Any, NamedTuple

from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from data_plane import group_queries as q
from data_plane.groups import (
    GroupHasActiveMembers,
    GroupNotFound,
    GroupTopicNotFound,
    MemberNotFound,
    sweep,
    topic_of,
)
from data_plane.leases import (
    RangeBits,
    group_by_lease,
    new_lease_id,
    parse_range_ack,
    range_ack_ids,
)
from data_plane.reader import BlockRow, SegmentReader
from data_plane.segment import Message
from infra.errors import Conflict, ValidationFailed
from tenants.ids import new_id, random_base62

Conn = AsyncConnection[DictRow]
UNKNOWN_ACK = "unknown or superseded ackId: the message was delivered again or its ack id is wrong"
EXPIRED_ACK = "the lease expired: the message will be delivered again, so its work may be repeated"


class AckRejected(Conflict):
    """The ack id's lease is over: the message may be (or have been) delivered again."""

    code = "ACK_REJECTED"


class Delivery(NamedTuple):
    """One leased message (a tuple: a pull builds up to a thousand of them)."""

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
    """The ids and settings delivery needs."""

    id: str
    name: str
    topic_id: str
    topic: str
    exactly_once: bool
    ack_timeout_s: float
    max_in_flight: int
    max_retries: int
    retry_delay_ms: int


@dataclass(frozen=True, slots=True)
class Pulled:
    """What a pull leased, with what a consumer that got nothing needs to wait for more."""

    ref: GroupRef  # with the group's settings as read by this pull
    deliveries: list[Delivery]
    partitions: frozenset[int]  # owned by the member at the pull
    wakeup: datetime | None  # the next lease expiry or due retry of those partitions


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


class GroupRefCache:
    """``(environment, topic, group) → GroupRef`` for ``ttl_s``: two lookups fewer per pull and ack.

    Correctness does not depend on it: a group id and its topic's delivery mode never change;
    a pull re-reads the group's settings and its topic's status in its first statement; and a
    caller that finds the member or the group gone forgets the entry and looks again
    (``control_plane.consume``), so a deleted or re-created group is noticed at once.
    """

    def __init__(self, ttl_s: float = 2.0, max_entries: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._refs: dict[tuple[str, str, str], tuple[float, GroupRef]] = {}

    def cached(self, environment_id: str, topic: str, group: str) -> GroupRef | None:
        """The ref if it was looked up less than ``ttl_s`` ago."""
        hit = self._refs.get((environment_id, topic, group))
        return hit[1] if hit is not None and time.monotonic() - hit[0] < self.ttl_s else None

    async def get(self, conn: Conn, environment_id: str, topic: str, group: str) -> GroupRef:
        """The cached ref, or a fresh lookup (a 404 when the topic or group does not exist)."""
        ref = self.cached(environment_id, topic, group)
        if ref is not None:
            return ref
        now = time.monotonic()
        key = (environment_id, topic, group)
        ref = await group_ref(conn, environment_id, topic, group)
        if len(self._refs) >= self.max_entries:
            self._refs.clear()
        self._refs[key] = (now, ref)
        return ref

    def forget(self, environment_id: str, topic: str, group: str | None = None) -> None:
        """Drop one group's entry, or every group of a topic."""
        for key in [k for k in self._refs if k[:2] == (environment_id, topic)]:
            if group is None or key[2] == group:
                del self._refs[key]


# --- pull -------------------------------------------------------------------------------------


async def pull(
    conn: Conn, reader: SegmentReader, ref: GroupRef, member_id: str, max_messages: int
) -> Pulled:
    """Lease up to ``max_messages`` messages to a member; commit the transaction to make it so.

    One round trip touches the member (with the group's current settings), locks its
    partitions in partition order, reads its in-flight count and due work, and selects the
    index rows of the fresh offsets; a second records one range lease per partition.
    """
    params = {
        "group_id": ref.id,
        "member_id": member_id,
        "topic_id": ref.topic_id,
        "limit": max_messages,
    }
    async with conn.pipeline():
        touched = await conn.execute(q.TOUCH_PULLER, params)
        owned_cur = await conn.execute(q.LOCK_OWNED_PARTITIONS, params)
        state_cur = await conn.execute(q.PULL_STATE, params)
        blocks_cur = await conn.execute(q.SELECT_FRESH_BLOCKS, params)
    settings = await touched.fetchone()
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
    owned = await owned_cur.fetchall()
    state = await state_cur.fetchone()
    assert state is not None
    blocks = _blocks_by_partition(await blocks_cur.fetchall())
    budget = min(max_messages, ref.max_in_flight - int(state["in_flight"]))
    deliveries = await _take(
        conn, reader, ref, member_id, owned, set(state["due_partitions"]), budget, blocks
    )
    return Pulled(ref, deliveries, frozenset(r["partition"] for r in owned), state["wakeup"])


def _blocks_by_partition(rows: list[DictRow]) -> dict[int, list[BlockRow]]:
    blocks: dict[int, list[BlockRow]] = {}
    for row in rows:
        partition = row.pop("partition")
        blocks.setdefault(partition, []).append(BlockRow(**row))
    return blocks


async def _take(
    conn: Conn,
    reader: SegmentReader,
    ref: GroupRef,
    member_id: str,
    owned: list[DictRow],
    due: set[int],
    budget: int,
    blocks: dict[int, list[BlockRow]],
) -> list[Delivery]:
    """Per partition in order: due redeliveries first, then fresh offsets, within ``budget``."""
    again: dict[int, list[Delivery]] = {}
    plan: list[tuple[int, int, int]] = []  # (partition, first offset, end offset)
    taken = 0
    for row in owned:
        partition = row["partition"]
        if budget - taken <= 0:
            break
        if partition in due:
            await _expire_ranges(conn, ref, partition)
            again[partition] = await _redeliver(
                conn, reader, ref, member_id, partition, budget - taken
            )
            taken += len(again[partition])
        first, end = row["delivered_offset"], row["next_offset"]
        if budget - taken > 0 and first < end:
            end = min(end, first + budget - taken)
            plan.append((partition, first, end))
            taken += end - first
    fresh = await _lease_fresh(conn, reader, ref, member_id, plan, blocks)
    return [
        item
        for row in owned
        for item in again.get(row["partition"], []) + fresh.get(row["partition"], [])
    ]


async def _lease_fresh(
    conn: Conn,
    reader: SegmentReader,
    ref: GroupRef,
    member_id: str,
    plan: list[tuple[int, int, int]],
    blocks: dict[int, list[BlockRow]],
) -> dict[int, list[Delivery]]:
    """Read the planned offsets and record one range lease per partition (one statement)."""
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
    if fresh:
        await conn.execute(
            q.INSERT_RANGE_LEASES,
            {
                "group_id": ref.id,
                "member_id": member_id,
                "ack_timeout_s": ref.ack_timeout_s,
                "partitions": leases["partitions"],
                "lease_ids": leases["lease_ids"],
                "first_offsets": leases["first"],
                "last_offsets": leases["last"],
            },
        )
    return fresh


async def _expire_ranges(conn: Conn, ref: GroupRef, partition: int) -> None:
    """Hand the open offsets of expired range leases to per-message rows, due for redelivery."""
    rows = await (
        await conn.execute(
            q.SELECT_EXPIRED_RANGE_LEASES, {"group_id": ref.id, "partition": partition}
        )
    ).fetchall()
    for lease in rows:
        await _hand_over(conn, ref, lease, _bits(lease).open_deltas())


def _bits(lease: dict[str, Any]) -> RangeBits:
    return RangeBits.from_text(lease["acked"], lease["done"])


async def _hand_over(conn: Conn, ref: GroupRef, lease: dict[str, Any], deltas: list[int]) -> None:
    """Offsets leave a range lease: per-message leases with the same ackId, attempt and end.

    From then on the per-message rules apply to them: expiry → redelivery with attempt 2 (or
    the dead-letter queue), a late at-least-once ack until then, nack, extend.
    """
    if not deltas:
        return
    ack_ids = range_ack_ids(lease["lease_id"], lease["last_offset"] - lease["first_offset"] + 1)
    await conn.execute(
        q.INSERT_SPLIT_DELIVERIES,
        {
            "group_id": ref.id,
            "partition": lease["partition"],
            "member_id": lease["member_id"],
            "lease_until": lease["lease_until"],
            "delivered_at": lease["delivered_at"],
            "offsets": [lease["first_offset"] + d for d in deltas],
            "ack_ids": [ack_ids[d] for d in deltas],
        },
    )
    await _set_bits(conn, ref, {lease["lease_id"]: _bits(lease).with_handed_over(deltas)}, False)


async def _set_bits(
    conn: Conn, ref: GroupRef, changes: dict[str, RangeBits], strict: bool
) -> set[str]:
    """Store new bitmaps; with ``strict`` only on unexpired leases. Returns the leases updated."""
    rows = await (
        await conn.execute(q.SET_RANGE_BITS, _bits_params(ref, changes, strict))
    ).fetchall()
    return {row["lease_id"] for row in rows}


def _bits_params(ref: GroupRef, changes: dict[str, RangeBits], strict: bool) -> dict[str, Any]:
    return {
        "group_id": ref.id,
        "strict": strict,
        "lease_ids": list(changes),
        "acked": [bits.acked_text for bits in changes.values()],
        "done": [bits.done_text for bits in changes.values()],
        "open_counts": [bits.open_count for bits in changes.values()],
    }


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
        await _commit_progress(conn, ref.id, [partition])
    return deliveries


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


async def _commit_progress(conn: Conn, group_id: str, partitions: list[int]) -> None:
    """Move committed offsets up to the lowest offset not yet done, and forget what is below."""
    await conn.execute(q.COMMIT_PROGRESS, {"group_id": group_id, "partitions": partitions})


# --- ack, nack, extend --------------------------------------------------------------------------


async def _lock_for(
    conn: Conn, ref: GroupRef, lease_ids: list[str], ack_ids: list[str]
) -> dict[str, dict[str, Any]]:
    """Lock the partitions of these leases and per-message ids in partition order (as pulls
    do, so no deadlock), then read the leases: stable while the transaction lasts."""
    params = {"group_id": ref.id, "lease_ids": lease_ids, "ack_ids": ack_ids}
    async with conn.pipeline():
        await conn.execute(q.LOCK_ACK_PARTITIONS, params)
        leases = await conn.execute(q.SELECT_RANGE_LEASES, params)
    return {row["lease_id"]: dict(row) for row in await leases.fetchall()}


@dataclass
class _AckPlan:
    """How each id of an ack request is settled."""

    done: list[str]
    rejected: dict[str, str]
    per_message: list[str]  # ids that a group_deliveries row speaks for
    changes: dict[str, RangeBits]  # new bitmaps per lease
    acking: dict[str, list[str]]  # ids each lease change acks
    partitions: dict[str, int]  # partition of each changed lease


def _plan_acks(
    ref: GroupRef, ranged: dict[str, list[tuple[str, int]]], leases: dict[str, dict[str, Any]]
) -> _AckPlan:
    plan = _AckPlan([], {}, [], {}, {}, {})
    for lease_id, items in ranged.items():
        lease = leases.get(lease_id)
        if lease is None:
            plan.rejected.update((a, UNKNOWN_ACK) for a, _ in items)
            continue
        bits, to_ack = _bits(lease), []
        if _all_open(ref, lease, bits, items):  # the common case: one check for the lot
            plan.changes[lease_id] = bits.with_acked(d for _, d in items)
            plan.acking[lease_id] = [a for a, _ in items]
            plan.partitions[lease_id] = lease["partition"]
            continue
        for ack_id, delta in items:
            if delta >= bits.size:
                plan.rejected[ack_id] = UNKNOWN_ACK
            elif bits.is_acked(delta):
                plan.done.append(ack_id)  # acked before: idempotent
            elif bits.is_done(delta):
                plan.per_message.append(ack_id)
            elif lease["expired"] and ref.exactly_once:
                plan.rejected[ack_id] = EXPIRED_ACK
            else:
                to_ack.append((ack_id, delta))
        if to_ack:
            plan.changes[lease_id] = bits.with_acked(d for _, d in to_ack)
            plan.acking[lease_id] = [a for a, _ in to_ack]
            plan.partitions[lease_id] = lease["partition"]
    return plan


def _all_open(
    ref: GroupRef, lease: dict[str, Any], bits: RangeBits, items: list[tuple[str, int]]
) -> bool:
    """Whether every one of these offsets of the lease can simply be acked now."""
    if lease["expired"] and ref.exactly_once:
        return False
    if max(d for _, d in items) >= bits.size:
        return False
    return not bits.mask(d for _, d in items) & bits.done


async def ack(conn: Conn, ref: GroupRef, ack_ids: list[str]) -> AckOutcome:
    """Settle leases as done, set-based: a few statements per request, whatever its size.

    Each id is judged on its own. Partition rows are locked in partition order before any
    lease, the order pulls use, so an ack spanning partitions cannot deadlock with a pull.
    """
    wanted = sorted(set(ack_ids))
    ranged, plain = group_by_lease(wanted)
    plan = _plan_acks(ref, ranged, await _lock_for(conn, ref, list(ranged), plain))
    partitions: set[int] = set()
    if plan.changes:
        async with conn.pipeline():
            updated = await conn.execute(
                q.SET_RANGE_BITS, _bits_params(ref, plan.changes, ref.exactly_once)
            )
            if not (plain or plan.per_message):
                await conn.execute(
                    q.COMMIT_PROGRESS,
                    {"group_id": ref.id, "partitions": sorted(set(plan.partitions.values()))},
                )
        stored = {row["lease_id"] for row in await updated.fetchall()}
        for lease_id, ids in plan.acking.items():
            if lease_id in stored:
                plan.done += ids
                partitions.add(plan.partitions[lease_id])
            else:  # expired since it was read (a member left and released it)
                plan.rejected.update((a, EXPIRED_ACK) for a in ids)
    if plain or plan.per_message:
        partitions |= await _ack_deliveries(conn, ref, plain + plan.per_message, plan)
        if partitions:
            await _commit_progress(conn, ref.id, sorted(partitions))
    done = set(plan.done)
    return AckOutcome(
        [a for a in wanted if a in done],
        [
            {"ackId": a, "reason": plan.rejected.get(a) or "the lease ended"}
            for a in wanted
            if a not in done
        ],
    )


async def _ack_deliveries(
    conn: Conn, ref: GroupRef, ack_ids: list[str], plan: _AckPlan
) -> set[int]:
    """Ack per-message leases (their partitions are locked); returns the partitions acked in."""
    params = {"group_id": ref.id, "ack_ids": ack_ids, "strict": ref.exactly_once}
    rows = {
        row["ack_id"]: dict(row)
        for row in await (await conn.execute(q.SELECT_LEASES_BY_ACK_IDS, params)).fetchall()
    }
    acked = await (await conn.execute(q.ACK_LEASES, params)).fetchall()
    now_done = {row["ack_id"] for row in acked}
    for ack_id in ack_ids:
        row = rows.get(ack_id)
        if ack_id in now_done or (row is not None and row["state"] == "acked"):
            plan.done.append(ack_id)
        else:
            plan.rejected[ack_id] = _refusal(ref, row) or "the lease ended"
    return {row["partition"] for row in acked}


def _refusal(ref: GroupRef, row: dict[str, Any] | None) -> str | None:
    """Why this per-message lease cannot be settled now, or None."""
    if row is None:
        return UNKNOWN_ACK
    if row["state"] != "leased":
        return None if row["state"] == "acked" else "the lease ended (nacked or dead-lettered)"
    if row["expired"] and ref.exactly_once:
        return EXPIRED_ACK
    return None


async def _locked_lease(conn: Conn, ref: GroupRef, ack_id: str) -> dict[str, Any] | None:
    """The per-message lease of ``ack_id``, its partition locked first (the order pulls use).

    An offset still in a range lease is handed over to a per-message row first.
    """
    parsed = parse_range_ack(ack_id)
    if parsed is not None:
        lease = (await _lock_for(conn, ref, [parsed[0]], [])).get(parsed[0])
        bits = _bits(lease) if lease else None
        if lease is not None and bits is not None and parsed[1] < bits.size:
            if bits.is_acked(parsed[1]):
                return {"state": "acked"}
            if not bits.is_done(parsed[1]):
                await _hand_over(conn, ref, lease, [parsed[1]])
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
        await _commit_progress(conn, ref.id, [row["partition"]])
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
    """Push the end of current, unexpired leases ``seconds`` from now.

    A range lease all of whose open offsets are named is extended as a whole; named offsets
    of a range that are only part of it leave it for per-message rows, extended one by one.
    """
    if not 1 <= seconds <= 43_200:
        raise ValidationFailed("seconds must be between 1 and 43200", field="seconds")
    ranged, per_message = group_by_lease(sorted(set(ack_ids)))
    leases = await _lock_for(conn, ref, list(ranged), per_message)
    whole: dict[str, list[str]] = {}
    for lease_id, items in ranged.items():
        lease = leases.get(lease_id)
        if lease is None:
            continue
        bits = _bits(lease)
        named = [(a, d) for a, d in items if d < bits.size and not bits.is_done(d)]
        per_message += [a for a, d in items if d < bits.size and bits.is_done(d)]
        if not named or lease["expired"]:
            continue
        if len(named) == bits.open_count:
            whole[lease_id] = [a for a, _ in named]
        else:
            await _hand_over(conn, ref, lease, [d for _, d in named])
            per_message += [a for a, _ in named]
    extended: list[str] = []
    if whole:
        params = {"group_id": ref.id, "lease_ids": list(whole), "seconds": seconds}
        for row in await (await conn.execute(q.EXTEND_RANGE_LEASES, params)).fetchall():
            extended += whole[row["lease_id"]]
    if per_message:
        params = {"group_id": ref.id, "ack_ids": per_message, "seconds": seconds}
        extended += [
            row["ack_id"] for row in await (await conn.execute(q.EXTEND_LEASE, params)).fetchall()
        ]
    return extended


async def wake(conn: Conn, topic_id: str, partition: int) -> None:
    """Wake waiting consumers of a topic (same channel and shape as the writer's notifications)."""
    await conn.execute(q.WAKE_CONSUMERS, {"payload": json.dumps([[topic_id, partition, -1]])})


# --- offsets ------------------------------------------------------------------------------------


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
    where = {"group_id": ref.id, "partition": partition}
    await conn.execute(q.LOCK_GROUP_PARTITION, where)
    await conn.execute(q.FORGET_PARTITION_DELIVERIES, where)
    await conn.execute(q.FORGET_PARTITION_LEASES, where)
    await conn.execute(q.SEEK_PARTITION, {**where, "offset": offset})
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
