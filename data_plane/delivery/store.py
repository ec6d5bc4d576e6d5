"""Statements shared by pulls and settlements: range hand-over, dead letters, committed offsets."""

from __future__ import annotations

from typing import Any

import msgspec
from psycopg.types.json import Jsonb

from data_plane.delivery import queries as q
from data_plane.delivery.leases import RangeBits, parse_range_ack, range_ack_ids
from data_plane.delivery.model import Conn, GroupRef
from data_plane.groups import queries as gq
from data_plane.read.reader import OffsetOutOfRange, SegmentReader
from data_plane.write.segment import Message, Schedule
from tenants.ids import new_id, random_base62


async def expire_ranges(conn: Conn, ref: GroupRef, partition: int) -> None:
    """Hand the open offsets of expired range leases to per-message rows, due for redelivery."""
    rows = await (
        await conn.execute(
            q.SELECT_EXPIRED_RANGE_LEASES, {"group_id": ref.id, "partition": partition}
        )
    ).fetchall()
    await hand_over_many(conn, ref, [(lease, lease_bits(lease).open_deltas()) for lease in rows])


def lease_bits(lease: dict[str, Any]) -> RangeBits:
    """The bitmaps of a ``group_leases`` row."""
    return RangeBits.from_text(lease["acked"], lease["done"])


async def hand_over(conn: Conn, ref: GroupRef, lease: dict[str, Any], deltas: list[int]) -> None:
    """Offsets leave a range lease: per-message leases with the same ackId, attempt and end.

    From then on the per-message rules apply to them: expiry → redelivery with attempt 2 (or
    the dead-letter queue), a late at-least-once ack until then, nack, extend.
    """
    await hand_over_many(conn, ref, [(lease, deltas)])


async def hand_over_many(
    conn: Conn, ref: GroupRef, items: list[tuple[dict[str, Any], list[int]]]
) -> None:
    """:func:`hand_over` for several leases: two statements, however many leases and offsets
    (a member that left may have held hundreds of small ranges)."""
    items = [(lease, deltas) for lease, deltas in items if deltas]
    if not items:
        return
    rows: list[tuple[Any, ...]] = []
    for lease, deltas in items:
        ack_ids = range_ack_ids(lease["lease_id"], lease["last_offset"] - lease["first_offset"] + 1)
        where, member = lease["partition"], lease["member_id"]
        until, delivered = lease["lease_until"], lease["delivered_at"]
        first = lease["first_offset"]
        rows += [(where, first + d, ack_ids[d], member, until, delivered) for d in deltas]
    columns = {
        key: list(values) for key, values in zip("poamud", zip(*rows, strict=True), strict=True)
    }
    await conn.execute(q.INSERT_SPLIT_DELIVERIES, {"group_id": ref.id, **columns})
    handed = {lease["lease_id"]: lease_bits(lease).with_handed_over(d) for lease, d in items}
    await set_bits(conn, ref, handed, False)


async def set_bits(
    conn: Conn, ref: GroupRef, changes: dict[str, RangeBits], strict: bool
) -> set[str]:
    """Store new bitmaps; with ``strict`` only on unexpired leases. Returns the leases updated."""
    rows = await (
        await conn.execute(q.SET_RANGE_BITS, bits_params(ref, changes, strict))
    ).fetchall()
    return {row["lease_id"] for row in rows}


def bits_params(ref: GroupRef, changes: dict[str, RangeBits], strict: bool) -> dict[str, Any]:
    """Parameters of ``SET_RANGE_BITS`` for new bitmaps of these leases."""
    return {
        "group_id": ref.id,
        "strict": strict,
        "lease_ids": list(changes),
        "acked": [bits.acked_text for bits in changes.values()],
        "done": [bits.done_text for bits in changes.values()],
        "open_counts": [bits.open_count for bits in changes.values()],
    }


async def message_at(
    conn: Conn, reader: SegmentReader, ref: GroupRef, partition: int, offset: int
) -> Message | None:
    """The message at ``offset``, or None when it is not stored (retention may have dropped it)."""
    return (await messages_at(conn, reader, ref, partition, [offset])).get(offset)


RUN_GAP = 64  # offsets this close are read in one go, the ones between them read and dropped
RUN_SPAN = 1_000


async def messages_at(
    conn: Conn, reader: SegmentReader, ref: GroupRef, partition: int, offsets: list[int]
) -> dict[int, Message]:
    """The messages at these offsets (ascending), read a run of nearby offsets at a time.

    Redeliveries come in runs (a crashed member's leases), so a pull of 1,000 of them is a
    handful of reads instead of 1,000. An offset retention has dropped is read from its
    dead-letter copy if it has one (a replayed dead letter), and is missing otherwise.
    """
    found: dict[int, Message] = {}
    for first, last in _runs(offsets):
        try:
            result = await reader.read(conn, ref.topic_id, partition, first, last - first + 1)
        except OffsetOutOfRange as exc:
            earliest = exc.data["earliest"]
            if first >= earliest:
                raise  # past the end: no delivered offset is
            if last < earliest:
                continue  # retention dropped the whole run
            result = await reader.read(conn, ref.topic_id, partition, earliest, last - earliest + 1)
        found.update((m.offset, m.message) for m in result.messages)
    wanted = set(offsets)
    messages = {offset: message for offset, message in found.items() if offset in wanted}
    if len(messages) < len(wanted):
        messages |= await _copies(conn, ref, partition, sorted(wanted - messages.keys()))
    return messages


async def _copies(
    conn: Conn, ref: GroupRef, partition: int, offsets: list[int]
) -> dict[int, Message]:
    """Dead-letter copies of offsets the topic no longer holds (a replay outliving retention)."""
    params = {"group_id": ref.id, "partition": partition, "offsets": offsets}
    rows = await (await conn.execute(q.SELECT_DEAD_LETTER_COPIES, params)).fetchall()
    return {
        row["offset"]: Message(
            row["message_key"],
            row["headers"],
            bytes(row["value"]),
            row["published_at_ms"],
            schedule=_schedule_of(row),
        )
        for row in rows
    }


def _schedule_of(row: dict[str, Any]) -> Schedule | None:
    """A dead letter's scheduling metadata (columns of migration 0026), if it had any."""
    keys = tuple(row["throttle_keys"] or ())
    if row["fairness_key"] is None and not row["weight"] and not keys:
        return None
    return Schedule(row["fairness_key"], row["weight"] or 0, keys)


def _runs(offsets: list[int]) -> list[tuple[int, int]]:
    """Ascending offsets as ``(first, last)`` runs: gaps up to RUN_GAP, spans up to RUN_SPAN."""
    runs: list[tuple[int, int]] = []
    for offset in offsets:
        if runs and offset - runs[-1][1] <= RUN_GAP and offset - runs[-1][0] < RUN_SPAN:
            runs[-1] = (runs[-1][0], offset)
        else:
            runs.append((offset, offset))
    return runs


async def dead_letter(
    conn: Conn,
    ref: GroupRef,
    partition: int,
    row: dict[str, Any],
    message: Message | None,
    error: str,
) -> None:
    """Copy the message to the dead-letter store; it then counts as done."""
    await dead_letter_many(conn, ref, partition, [(row, message, error)])


async def dead_letter_many(
    conn: Conn,
    ref: GroupRef,
    partition: int,
    items: list[tuple[dict[str, Any], Message | None, str]],
) -> None:
    """:func:`dead_letter` for ``(row, message, error)`` items of one partition, in two
    statements. A message retention dropped (None) is marked dead without a copy."""
    if not items:
        return
    stored = [(row, message, error) for row, message, error in items if message is not None]
    if stored:
        await conn.execute(q.INSERT_DEAD_LETTERS, _letters(ref, partition, stored))
    params = {
        "group_id": ref.id,
        "partition": partition,
        "offsets": [row["offset"] for row, _, _ in items],
        "errors": [error for _, _, error in items],
    }
    await conn.execute(q.MARK_DEAD, params)


def _letters(
    ref: GroupRef, partition: int, stored: list[tuple[dict[str, Any], Message, str]]
) -> dict[str, Any]:
    """The arguments of ``INSERT_DEAD_LETTERS``."""
    return {
        "group_id": ref.id,
        "partition": partition,
        "ids": [new_id("dlq") for _ in stored],
        "offsets": [row["offset"] for row, _, _ in stored],
        "keys": [message.key for _, message, _ in stored],
        "headers": [Jsonb(message.headers) for _, message, _ in stored],
        "values": [message.value for _, message, _ in stored],
        "published_at_ms": [message.timestamp_ms for _, message, _ in stored],
        "errors": [error for _, _, error in stored],
        "attempts": [row["attempt"] for row, _, _ in stored],
        "first_delivered_at": [row["first_delivered_at"] for row, _, _ in stored],
        "fairness_keys": [_fairness_key(message) for _, message, _ in stored],
        "throttle_keys": [_throttle_keys(message) for _, message, _ in stored],
        "weights": [
            message.schedule.weight if message.schedule else None for _, message, _ in stored
        ],
    }


def _fairness_key(message: Message) -> str | None:
    return None if message.schedule is None else message.schedule.fairness_key


def _throttle_keys(message: Message) -> Jsonb | None:
    schedule = message.schedule
    return Jsonb(list(schedule.throttle_keys)) if schedule and schedule.throttle_keys else None


async def commit_progress(conn: Conn, group_id: str, partitions: list[int]) -> None:
    """Move committed offsets up to the lowest offset not yet done, and forget what is below."""
    await conn.execute(q.COMMIT_PROGRESS, {"group_id": group_id, "partitions": partitions})


async def lock_for(
    conn: Conn, ref: GroupRef, lease_ids: list[str], ack_ids: list[str]
) -> dict[str, dict[str, Any]]:
    """Lock the partitions of these leases and per-message ids in partition order (as pulls
    do, so no deadlock), then read the leases: stable while the transaction lasts."""
    params = {"group_id": ref.id, "lease_ids": lease_ids, "ack_ids": ack_ids}
    async with conn.pipeline():
        await conn.execute(q.LOCK_ACK_PARTITIONS, params)
        leases = await conn.execute(q.SELECT_RANGE_LEASES, params)
    return {row["lease_id"]: dict(row) for row in await leases.fetchall()}


async def wake(conn: Conn, topic_id: str, partition: int) -> None:
    """Wake waiting consumers of a topic (same channel and shape as the writer's notifications)."""
    await conn.execute(
        gq.WAKE_CONSUMERS, {"payload": msgspec.json.encode([[topic_id, partition, -1]]).decode()}
    )


def new_ack_id() -> str:
    """A per-message ackId (a redelivery's)."""
    return "ack_" + random_base62(24)


SETTLED_ACK_GRACE_S = 600  # how long after its lease was forgotten a repeated ack is known
PURGE_BATCH = 10_000


async def acked_before(conn: Conn, ref: GroupRef, ack_ids: list[str]) -> set[str]:
    """The ids among ``ack_ids`` acked through a lease or row forgotten since.

    The committed offset's move deletes what is wholly below it; the tombstone it leaves
    (``settled_acks``) lets an ack sent again after a lost response be answered "acked".
    """
    ranges = {ack_id: parse_range_ack(ack_id) for ack_id in ack_ids}
    keys = list(ack_ids) + [parsed[0] for parsed in ranges.values() if parsed]
    params = {"group_id": ref.id, "keys": keys}
    rows = await (await conn.execute(q.SELECT_SETTLED_ACKS, params)).fetchall()
    acked = {row["ack_key"]: row["acked"] for row in rows}
    return {a for a, parsed in ranges.items() if acked.get(a) == "1" or _bit(acked, parsed)}


def _bit(acked: dict[str, str], parsed: tuple[str, int] | None) -> bool:
    """Whether the range tombstone of ``(lease_id, delta)`` has that offset acked."""
    if parsed is None or parsed[0] not in acked:
        return False
    bits = RangeBits.from_text(acked[parsed[0]], acked[parsed[0]])
    return parsed[1] < bits.size and bits.is_acked(parsed[1])


async def purge_settled_acks(conn: Conn, grace_s: float = SETTLED_ACK_GRACE_S) -> int:
    """Delete tombstones older than ``grace_s``; how many.

    Needs an autocommit connection: each batch is its own transaction, so a long backlog never
    holds locks for long.
    """
    purged = 0
    while True:
        cursor = await conn.execute(
            q.PURGE_SETTLED_ACKS, {"grace_s": grace_s, "batch": PURGE_BATCH}
        )
        purged += cursor.rowcount
        if cursor.rowcount < PURGE_BATCH:
            return purged
