"""A group's stats (Fila's ``GetStats``): depth, in flight, consumers, and for a fair group each
fairness key's pending messages, deficit and weight, and each throttle key's bucket.

``depth`` counts the messages waiting for delivery: the lag (end offset - committed offset) less
those in flight and those already done above the committed offset. ``perKey`` is read from the
look-ahead windows a fair pull schedules from (:data:`data_plane.delivery.fair.WINDOW` offsets per
partition), so a key's ``pending`` counts its messages in those windows, not beyond them.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from data_plane.config.service import Limit
from data_plane.delivery import queries as q
from data_plane.delivery.drr import Fairness, KeyState
from data_plane.delivery.fair import WINDOW, _fair_state, _pending
from data_plane.delivery.model import Conn, GroupRef
from data_plane.read.reader import OffsetOutOfRange, SegmentReader


class KeyStats(msgspec.Struct):
    """A fairness key of a fair group."""

    key: str
    pending: int
    deficit: int
    weight: int


class ThrottleStats(msgspec.Struct, rename="camel"):
    """A throttle key's token bucket, now."""

    key: str
    tokens: float
    rate_per_second: float
    burst: float


class GroupStats(msgspec.Struct, rename="camel"):
    """``GET …/groups/{group}/stats``."""

    depth: int
    in_flight: int
    active_consumers: int
    active_fairness_keys: int
    quantum: int
    per_key: list[KeyStats]
    per_throttle: list[ThrottleStats]
    hook_errors: int


async def group_stats(
    conn: Conn,
    reader: SegmentReader,
    ref: GroupRef,
    tokens: Mapping[str, float],
    limits: Mapping[str, Limit],
    hook_errors: int,
) -> GroupStats:
    """The stats of one group; ``tokens`` and ``limits`` are its environment's throttle keys."""
    row = await (
        await conn.execute(q.GROUP_COUNTS, {"group_id": ref.id, "topic_id": ref.topic_id})
    ).fetchone()
    assert row is not None
    in_flight = int(row["in_flight"])
    depth = max(int(row["lag"]) - in_flight - int(row["done_ahead"]), 0)
    per_key: list[KeyStats] = []
    quantum = 1
    if ref.fair:
        owned = [{"partition": p, "delivered_offset": d} for p, d, _ in row["windows"]]
        fairness, rounds, ahead = await _fair_state(conn, ref, owned)
        quantum = fairness.quantum
        if fairness.enabled:
            per_key = await _per_key(conn, reader, ref, row["windows"], fairness, rounds, ahead)
    throttles = [
        ThrottleStats(key, round(tokens.get(key, limit.burst), 3), limit.rate, limit.burst)
        for key, limit in sorted(limits.items())
    ]
    active = sum(1 for k in per_key if k.pending > 0)
    return GroupStats(
        depth,
        in_flight,
        int(row["active_consumers"]),
        active,
        quantum,
        per_key,
        throttles,
        hook_errors,
    )


async def _per_key(
    conn: Conn,
    reader: SegmentReader,
    ref: GroupRef,
    windows: list[list[int]],
    fairness: Fairness,
    rounds: dict[int, dict[str, KeyState]],
    ahead: dict[int, set[int]],
) -> list[KeyStats]:
    """Each key's pending messages in the windows, its deficit (summed over partitions) and weight."""
    pending: dict[str, int] = {}
    weights: dict[str, int] = {}
    for partition, delivered, end in windows:
        if delivered >= end:
            continue
        try:
            result = await reader.read(
                conn, ref.topic_id, partition, delivered, min(end - delivered, WINDOW)
            )
        except OffsetOutOfRange:
            continue
        taken = ahead.get(partition, set())
        for stored in result.messages:
            if stored.offset in taken:
                continue
            item = _pending(stored.offset, stored.message)
            pending[item.key] = pending.get(item.key, 0) + 1
            weights.setdefault(item.key, fairness.weight_of(item.key, item.weight))
    deficits: dict[str, int] = {}
    for saved in rounds.values():
        for key, state in saved.items():
            deficits[key] = deficits.get(key, 0) + state.deficit
    keys = sorted(pending.keys() | deficits.keys())
    return [
        KeyStats(
            key,
            pending.get(key, 0),
            deficits.get(key, 0),
            weights.get(key, fairness.weight_of(key, 0)),
        )
        for key in keys
    ]
