"""Settling leases: ack (set-based, per request), nack with backoff, extend."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.db import autocommit
from core.errors import ValidationFailed
from data_plane.delivery import queries as q
from data_plane.delivery.leases import RangeBits, group_by_lease, named_bits, parse_range_ack
from data_plane.delivery.model import (
    EXPIRED_ACK,
    UNKNOWN_ACK,
    AckOutcome,
    AckRejected,
    Conn,
    GroupRef,
)
from data_plane.delivery.store import (
    acked_before,
    bits_params,
    commit_progress,
    dead_letter,
    hand_over,
    lease_bits,
    lock_for,
    message_at,
    wake,
)
from data_plane.hooks.failure import FailureHook
from data_plane.read.reader import SegmentReader
from observability import metrics

MAX_EXTEND_S = 43_200  # an extension reaches at most 12 h from now


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
        bits, to_ack = lease_bits(lease), []
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

    When every id is a range ackId, one statement in autocommit mode (``qc_ack_ranges``,
    migration 0010) acks each lease all of whose named offsets are still open, and moves the
    committed offsets: one round trip, commit included. Ids of other leases (acked before,
    handed over, expired, unknown) and per-message ids are then judged one by one in a
    transaction. Partition rows are locked in partition order before any lease, the order
    pulls use, so an ack spanning partitions cannot deadlock with a pull.
    """
    wanted = sorted(set(ack_ids))
    ranged, plain = group_by_lease(wanted)
    done: set[str] = set()
    if ranged and not plain:
        for lease_id in await _ack_open_ranges(conn, ref, ranged):
            done.update(ack_id for ack_id, _ in ranged.pop(lease_id))
    rejected: list[dict[str, str]] = []
    if ranged or plain:
        rest = await _ack_in_transaction(conn, ref, ranged, plain)
        done.update(rest.done)
        rejected = rest.rejected
    if done:  # one record per ack request, its size as the value
        metrics.MESSAGES_ACKED.add(len(done), metrics.delivery_attributes(ref.exactly_once))
    return AckOutcome([a for a in wanted if a in done], rejected)


async def _ack_open_ranges(
    conn: Conn, ref: GroupRef, ranged: dict[str, list[tuple[str, int]]]
) -> list[str]:
    """The leases ``qc_ack_ranges`` acked: those all of whose named offsets were open."""
    params = {
        "group_id": ref.id,
        "strict": ref.exactly_once,
        "lease_ids": list(ranged),
        "masks": [named_bits(delta for _, delta in items) for items in ranged.values()],
    }
    async with autocommit(conn):
        with metrics.db_statement("ack_ranges"):
            row = await (await conn.execute(q.ACK_RANGES, params)).fetchone()
    assert row is not None
    return list(row["acked"])


async def _ack_in_transaction(
    conn: Conn, ref: GroupRef, ranged: dict[str, list[tuple[str, int]]], plain: list[str]
) -> AckOutcome:
    """Each id judged on its own, in one transaction (the leases read under their locks)."""
    wanted = sorted([a for items in ranged.values() for a, _ in items] + plain)
    plan = _plan_acks(ref, ranged, await lock_for(conn, ref, list(ranged), plain))
    partitions: set[int] = set()
    if plan.changes:
        with metrics.db_statement("ack_range_bits"):
            async with conn.pipeline():
                updated = await conn.execute(
                    q.SET_RANGE_BITS, bits_params(ref, plan.changes, ref.exactly_once)
                )
                if not (plain or plan.per_message):
                    await conn.execute(
                        q.COMMIT_PROGRESS,
                        {"group_id": ref.id, "partitions": sorted(set(plan.partitions.values()))},
                    )
                    # Nothing else to write: the commit rides in the same round trip.
                    await conn.commit()
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
            with metrics.db_statement("commit_progress"):
                await commit_progress(conn, ref.id, sorted(partitions))
    unknown = [a for a, reason in plan.rejected.items() if reason == UNKNOWN_ACK]
    if unknown:  # a lease forgotten since: was the id acked through it (a repeated ack)?
        plan.done += await acked_before(conn, ref, unknown)
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
        lease = (await lock_for(conn, ref, [parsed[0]], [])).get(parsed[0])
        bits = lease_bits(lease) if lease else None
        if lease is not None and bits is not None and parsed[1] < bits.size:
            if bits.is_acked(parsed[1]):
                return {"state": "acked"}
            if not bits.is_done(parsed[1]):
                await hand_over(conn, ref, lease, [parsed[1]])
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
    exact_delay_ms: int | None = None,
    on_failure: FailureHook | None = None,
) -> dict[str, Any]:
    """Schedule a retry with exponential backoff, or dead-letter after ``maxRetries``; a
    group's ``onFailure`` hook decides instead when it has one (and it does not fail).

    ``exact_delay_ms`` replaces the backoff (a push endpoint's ``Retry-After``)."""
    row = await _locked_lease(conn, ref, ack_id)
    if row is None and await acked_before(conn, ref, [ack_id]):
        row = {"state": "acked"}
    reason = _refusal(ref, row)
    if reason or row is None or row["state"] != "leased":
        raise AckRejected(reason or "the message was already acked", ack_id=ack_id)
    metrics.MESSAGES_NACKED.add(1, metrics.delivery_attributes(ref.exactly_once))
    decision, message, read = None, None, False
    if on_failure is not None:
        message, read = await message_at(conn, reader, ref, row["partition"], row["offset"]), True
        if message is not None:
            decision = on_failure.decide(message.key, message.headers, row["attempt"], error)
    give_up = row["attempt"] > ref.max_retries if decision is None else decision.action == "dlq"
    if give_up:
        if not read:
            message = await message_at(conn, reader, ref, row["partition"], row["offset"])
        await dead_letter(conn, ref, row["partition"], row, message, error)
        with metrics.db_statement("commit_progress"):
            await commit_progress(conn, ref.id, [row["partition"]])
        attributes = metrics.dead_letter_attributes(ref.exactly_once, "nack")
        metrics.MESSAGES_DEAD_LETTERED.add(1, attributes)
        return {"ackId": ack_id, "deadLettered": True, "retryInMs": None}
    if exact_delay_ms is not None:  # a push endpoint's Retry-After
        delay_ms = exact_delay_ms
    elif decision is not None:  # the hook's delay, as it said
        delay_ms = decision.delay_ms
    else:
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


async def fail_in_place(conn: Conn, ref: GroupRef, ack_id: str, error: str) -> int:
    """Count a failed attempt and keep the lease: the lease's new attempt.

    For a pusher of an ordered group, which retries a message itself after its backoff rather
    than let it go, so that the next message of its key cannot overtake it. Should the pusher
    die meanwhile, the lease expires and the message is delivered again with the next attempt.
    """
    row = await _locked_lease(conn, ref, ack_id)
    reason = _refusal(ref, row)
    if reason or row is None or row["state"] != "leased":
        raise AckRejected(reason or "the message was already settled", ack_id=ack_id)
    params = {"group_id": ref.id, "ack_id": ack_id, "error": error}
    counted = await (await conn.execute(q.COUNT_FAILED_ATTEMPT, params)).fetchone()
    if counted is None:
        raise AckRejected(EXPIRED_ACK, ack_id=ack_id)
    return int(counted["attempt"])


async def nack_many(
    conn: Conn,
    reader: SegmentReader,
    ref: GroupRef,
    items: list[tuple[str, str, int | None]],
    on_failure: FailureHook | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Nack each ``(ackId, error, retry delay ms)`` as :func:`nack`: the nacked and the refused.

    Each in a transaction of its own, as a request of one would be, so a refused id leaves the
    others nacked and no two partitions are locked at once (no deadlock with a pull)."""
    nacked: list[dict[str, Any]] = []
    rejected: list[dict[str, str]] = []
    for ack_id, error, delay_ms in items:
        try:
            nacked.append(
                await nack(conn, reader, ref, ack_id, error, delay_ms, on_failure=on_failure)
            )
        except AckRejected as exc:
            await conn.rollback()
            rejected.append({"ackId": ack_id, "reason": exc.message})
            continue
        await conn.commit()
    return nacked, rejected


async def extend(conn: Conn, ref: GroupRef, ack_ids: list[str], seconds: int) -> list[str]:
    """Push the end of current, unexpired leases ``seconds`` from now.

    A range lease all of whose open offsets are named is extended as a whole; named offsets
    of a range that are only part of it leave it for per-message rows, extended one by one.
    """
    if not 1 <= seconds <= MAX_EXTEND_S:
        raise ValidationFailed(f"seconds must be between 1 and {MAX_EXTEND_S}", field="seconds")
    ranged, per_message = group_by_lease(sorted(set(ack_ids)))
    leases = await lock_for(conn, ref, list(ranged), per_message)
    whole: dict[str, list[str]] = {}
    for lease_id, items in ranged.items():
        lease = leases.get(lease_id)
        if lease is None:
            continue
        bits = lease_bits(lease)
        named = [(a, d) for a, d in items if d < bits.size and not bits.is_done(d)]
        per_message += [a for a, d in items if d < bits.size and bits.is_done(d)]
        if not named or lease["expired"]:
            continue
        if len(named) == bits.open_count:
            whole[lease_id] = [a for a, _ in named]
        else:
            await hand_over(conn, ref, lease, [d for _, d in named])
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
