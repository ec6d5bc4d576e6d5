"""Fair pulls: a fair group's partitions delivered by deficit round robin across fairness keys.

A group without fairness pulls in one statement (:mod:`data_plane.delivery.pulls`); this module
routes every pull (:func:`pull`) and serves the fair ones. A fair pull is one transaction, as a
pull with redeliveries due is:

1. ``qc_pull_v3`` without lease ids, sent with the ``BEGIN``: the member touched, its partitions
   locked (the sequencer: replicas take turns on a partition), its state, and the block index rows
   of each partition's look-ahead window: the :data:`WINDOW` offsets from ``delivered_offset``;
2. in one round trip: the group's fairness settings, each partition's round (deficits and
   places, ``fair_deficits``) and the offsets at or above ``delivered_offset`` already delivered;
3. per partition in order, within the member's window: due redeliveries first (throttled ones
   wait), then the window's undelivered messages by deficit round robin (:mod:`.drr`), each turn's
   messages checked against their throttle keys (:mod:`.throttle`);
4. with the ``COMMIT``: one range lease per run of consecutive picked offsets, the new
   ``delivered_offset`` (the lowest offset not delivered yet) and the rounds.

So ``delivered_offset`` of a fair group's partition is the lowest offset never delivered, offsets
above it may be delivered already (their leases and rows say which), and the committed offset is
still the lowest offset not done: ``qc_commit_progress`` looks at leases, rows and
``delivered_offset``, whichever way they were made. Lag keeps its meaning.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from data_plane.delivery import queries as q
from data_plane.delivery.drr import IN_ORDER, SHARED_KEY, Fairness, KeyState, Pending, Round
from data_plane.delivery.leases import new_lease_id, range_ack_ids
from data_plane.delivery.model import Conn, Delivery, FairGroup, GroupRef, Pulled
from data_plane.delivery.pulls import (
    _blocks_by_partition,
    _found,
    _pull_params,
    _pulled,
    _redeliver,
    _with_settings,
)
from data_plane.delivery.pulls import pull as pull_in_order
from data_plane.delivery.store import expire_ranges
from data_plane.delivery.throttle import Throttle
from data_plane.groups import queries as gq
from data_plane.read.reader import BlockRow, SegmentReader
from data_plane.write.segment import Message
from observability import metrics

WINDOW = 1_000  # offsets a fair pull looks ahead in a partition for other keys' messages
ThrottleSource = Callable[[], Awaitable[Throttle]]


async def pull(
    conn: Conn,
    reader: SegmentReader,
    ref: GroupRef,
    member_id: str,
    max_messages: int,
    owned: int | None = None,
    *,
    throttle: ThrottleSource | None = None,
    window: int = WINDOW,
) -> Pulled:
    """Lease up to ``max_messages`` to a member, fairly if the group is fair, and commit.

    ``throttle`` gives the caller environment's throttle keys (asked only for a fair group)."""
    if not ref.fair:
        try:
            return await pull_in_order(conn, reader, ref, member_id, max_messages, owned)
        except FairGroup:
            pass  # the cached ref was older than the group's fairness
    gate = None if throttle is None else await throttle()
    pulled = await _pull_fair(conn, reader, ref, member_id, max_messages, gate, window)
    if pulled.deliveries:
        metrics.MESSAGES_DELIVERED.add(
            len(pulled.deliveries), metrics.delivery_attributes(ref.exactly_once)
        )
    return pulled


class _Plan:
    """What a fair pull writes with its commit."""

    def __init__(self) -> None:
        self.leases: dict[str, list[Any]] = {"p": [], "id": [], "first": [], "last": []}
        self.delivered: dict[int, int] = {}
        self.rounds: dict[int, dict[str, KeyState]] = {}

    def lease(self, partition: int, offsets: list[int]) -> list[tuple[str, int, int]]:
        """Range leases for ``offsets`` (ascending), one per run of consecutive offsets:
        ``(lease id, first, last)`` each."""
        made = []
        for first, last in _runs(offsets):
            lease_id = new_lease_id()
            for column, value in zip(self.leases, (partition, lease_id, first, last), strict=True):
                self.leases[column].append(value)
            made.append((lease_id, first, last))
        return made


async def _pull_fair(
    conn: Conn,
    reader: SegmentReader,
    ref: GroupRef,
    member_id: str,
    max_messages: int,
    throttle: Throttle | None,
    window: int,
) -> Pulled:
    """The fair pull's transaction (see the module docstring)."""
    with metrics.db_statement("pull_fair"):
        async with conn.pipeline():  # with the transaction's BEGIN: one round trip
            cursor = await conn.execute(q.PULL, _pull_params(ref, member_id, window, []))
        found = await _found(cursor)
    ref = _with_settings(ref, member_id, found["settings"])
    owned, state = found["owned"], found["state"]
    budget = min(max_messages, ref.max_in_flight - int(state["in_flight"]))
    if budget <= 0 or not owned:
        await conn.commit()
        return _pulled(ref, found, [])
    fairness, rounds, ahead = await _fair_state(conn, ref, owned)
    gate = throttle if fairness.enabled else None
    blocks = _blocks_by_partition(found["blocks"])
    due = set(state["due_partitions"])
    plan, deliveries = _Plan(), []
    for row in owned:
        partition = row["partition"]
        if budget <= 0:
            break
        if partition in due:
            await expire_ranges(conn, ref, partition)
            admit = None if gate is None else _admit_redeliveries(gate)
            again = await _redeliver(conn, reader, ref, member_id, partition, budget, admit)
            deliveries += again
            budget -= len(again)
        if budget > 0 and row["delivered_offset"] < row["next_offset"]:
            fresh = await _schedule(
                conn, reader, ref, row, blocks.get(partition, []), ahead.get(partition, set()),
                rounds.get(partition, {}), fairness, budget, gate, window, plan,
            )  # fmt: skip
            deliveries += fresh
            budget -= len(fresh)
    await _commit(conn, ref, member_id, plan, fairness)
    pulled = _pulled(ref, found, deliveries)
    return _with_wakeup(pulled, None if gate is None else gate.wait_ms)


async def _fair_state(
    conn: Conn, ref: GroupRef, owned: list[dict[str, Any]]
) -> tuple[Fairness, dict[int, dict[str, KeyState]], dict[int, set[int]]]:
    """The group's fairness, each owned partition's round, and what it delivered ahead."""
    params = {
        "group_id": ref.id,
        "partitions": [row["partition"] for row in owned],
        "delivered": [row["delivered_offset"] for row in owned],
    }
    async with conn.pipeline():
        settings = await conn.execute(q.SELECT_FAIRNESS, params)
        deficits = await conn.execute(q.SELECT_FAIR_DEFICITS, params)
        delivered = await conn.execute(q.SELECT_DELIVERED_AHEAD, params)
    row = await settings.fetchone()
    rounds: dict[int, dict[str, KeyState]] = {}
    for saved in await deficits.fetchall():
        rounds.setdefault(saved["partition"], {})[saved["fairness_key"]] = KeyState(
            saved["deficit"], saved["turn"]
        )
    ahead: dict[int, set[int]] = {}
    for taken in await delivered.fetchall():
        ahead.setdefault(taken["partition"], set()).update(
            range(taken["first_offset"], taken["last_offset"] + 1)
        )
    return fairness_of(row), rounds, ahead


def fairness_of(row: Mapping[str, Any] | None) -> Fairness:
    """A ``group_fairness`` row as settings; none (no longer fair): offset order."""
    if row is None:
        return IN_ORDER
    if not row["enabled"]:
        return IN_ORDER
    return Fairness(
        weights=dict(row["weights"]),
        default_weight=row["default_weight"],
        quantum=row["quantum"],
    )


async def _schedule(
    conn: Conn,
    reader: SegmentReader,
    ref: GroupRef,
    row: dict[str, Any],
    blocks: list[BlockRow],
    ahead: set[int],
    saved: dict[str, KeyState],
    fairness: Fairness,
    budget: int,
    gate: Throttle | None,
    window: int,
    plan: _Plan,
) -> list[Delivery]:
    """One partition's window played by deficit round robin: its deliveries, in order."""
    partition, first = row["partition"], row["delivered_offset"]
    end = min(row["next_offset"], first + window)
    messages = await reader.read_blocks(conn, ref.topic_id, partition, blocks, first, end)
    pending = [
        _pending(offset, m)
        for offset, m in enumerate(messages, first)
        if not ahead or offset not in ahead
    ]
    round_ = Round(pending, saved, fairness, budget)
    while (turn := round_.next_turn()) is not None:
        key, items = turn
        if gate is None or not any(item.throttle_keys for item in items):
            round_.granted(len(items))
        else:
            round_.granted(await gate.admit_prefix(key, [item.throttle_keys for item in items]))
    picked = [item.offset for item in round_.picked]
    taken = ahead | set(picked)
    delivered = first
    while delivered in taken:
        delivered += 1
    plan.delivered[partition] = delivered
    plan.rounds[partition] = round_.state() if fairness.enabled else {}
    leases = plan.lease(partition, sorted(picked))
    return _fair_deliveries(partition, picked, leases, messages, first)


def _pending(offset: int, message: Message) -> Pending:
    """What the round needs of a message."""
    schedule = message.schedule
    if schedule is None:
        return Pending(offset)
    key = SHARED_KEY if schedule.fairness_key is None else schedule.fairness_key
    return Pending(offset, key, schedule.weight, schedule.throttle_keys)


def _fair_deliveries(
    partition: int,
    picked: list[int],
    leases: list[tuple[str, int, int]],
    messages: list[Message],
    first_offset: int,
) -> list[Delivery]:
    """The deliveries of the picked offsets, in the round's order, with their range ack ids
    (``messages`` are the window's, from ``first_offset``)."""
    ack_ids: dict[int, str] = {}
    for lease_id, first, last in leases:
        ack_ids.update(
            zip(range(first, last + 1), range_ack_ids(lease_id, last - first + 1), strict=True)
        )
    return [
        Delivery(partition, offset, 1, ack_ids[offset], messages[offset - first_offset])
        for offset in picked
    ]


def _runs(offsets: list[int]) -> list[tuple[int, int]]:
    """Ascending offsets as ``(first, last)`` runs of consecutive offsets."""
    runs: list[tuple[int, int]] = []
    for offset in offsets:
        if runs and offset == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], offset)
        else:
            runs.append((offset, offset))
    return runs


def _admit_redeliveries(gate: Throttle) -> Any:
    """A redelivery filter: throttled ones wait (postponed until a token is due)."""

    async def admit(conn: Conn, ref: GroupRef, deliveries: list[Delivery]) -> list[Delivery]:
        candidates = [(_pending(d.offset, d.message).key, _keys(d.message)) for d in deliveries]
        verdicts = await gate.admit(candidates)
        held = [d.offset for d, ok in zip(deliveries, verdicts, strict=True) if not ok]
        if held:
            params = {
                "group_id": ref.id,
                "partition": deliveries[0].partition,
                "offsets": held,
                "wait_s": (gate.wait_ms or 1000) / 1000,
            }
            await conn.execute(q.POSTPONE_REDELIVERIES, params)
        return [d for d, ok in zip(deliveries, verdicts, strict=True) if ok]

    return admit


def _keys(message: Message) -> tuple[str, ...]:
    return () if message.schedule is None else message.schedule.throttle_keys


async def _commit(
    conn: Conn, ref: GroupRef, member_id: str, plan: _Plan, fairness: Fairness
) -> None:
    """The leases, delivered offsets and rounds, with the commit: one round trip."""
    partitions = list(plan.delivered)
    keys = [(p, key, s) for p in plan.rounds for key, s in plan.rounds[p].items()]
    async with conn.pipeline():
        if plan.leases["p"]:
            await conn.execute(
                q.INSERT_FAIR_LEASES,
                {
                    "group_id": ref.id,
                    "member_id": member_id,
                    "ack_timeout_s": ref.ack_timeout_s,
                    "partitions": plan.leases["p"],
                    "lease_ids": plan.leases["id"],
                    "first_offsets": plan.leases["first"],
                    "last_offsets": plan.leases["last"],
                },
            )
        if partitions:
            await conn.execute(
                q.SAVE_FAIR_PARTITIONS,
                {
                    "group_id": ref.id,
                    "partitions": partitions,
                    "delivered": [plan.delivered[p] for p in partitions],
                },
            )
            await conn.execute(
                q.SAVE_FAIR_DEFICITS,
                {
                    "group_id": ref.id,
                    "partitions": [p for p, _, _ in keys],
                    "keys": [key for _, key, _ in keys],
                    "deficits": [s.deficit for _, _, s in keys],
                    "turns": [s.turn for _, _, s in keys],
                },
            )
        if not fairness.enabled:
            await conn.execute(gq.FORGET_FAIRNESS, {"group_id": ref.id})
        await conn.commit()


def _with_wakeup(pulled: Pulled, wait_ms: int | None) -> Pulled:
    """A throttled pull wakes its waiting consumer when the first token is due."""
    if wait_ms is None:
        return pulled
    due = datetime.now(UTC) + timedelta(milliseconds=wait_ms)
    if pulled.wakeup is not None and pulled.wakeup <= due:
        return pulled
    return replace(pulled, wakeup=due)
