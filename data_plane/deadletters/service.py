"""The dead-letter queue of a consumer group: inspect, replay one, replay all.

A dead letter is a copy of a message that exhausted its retries (``maxRetries``), with why and
after how many attempts. Replaying one delivers it to the group again, due at once, as attempt 1
with its retries afresh, at its original partition and offset (and message id); should it fail
again it comes back to the queue. Committed offsets and lag do not move (docs/decisions.md §23).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec

from core.errors import Conflict, NotFound, ValidationFailed
from core.wire_types import BIGINT_MAX
from data_plane.deadletters import queries as q
from data_plane.delivery import queries as dq
from data_plane.delivery.model import Conn, GroupRef
from data_plane.groups import queries as gq
from data_plane.groups.service import dead_letter_depth
from data_plane.read.schemas import MessageView, iso_timestamp
from data_plane.write.publish import message_id, parse_message_id

REPLAY_BATCH = 1_000  # dead letters replayed per transaction by a replay of the whole queue
MAX_PAGE = 1_000
_START = (datetime(1, 1, 1, tzinfo=UTC), -1, -1)  # before every entry


class DeadLetterNotFound(NotFound):
    """The group's dead-letter queue has no such message."""

    code = "DLQ_MESSAGE_NOT_FOUND"

    def __init__(self, message_id: str) -> None:
        super().__init__(
            f"The message '{message_id}' is not in this group's dead-letter queue.",
            message_id=message_id,
        )


class DeadLetterReplayed(Conflict):
    """The message was replayed already and has not failed again since."""

    code = "DLQ_MESSAGE_REPLAYED"

    def __init__(self, message_id: str, replayed_at: datetime) -> None:
        super().__init__(
            f"The message '{message_id}' was replayed at {replayed_at.isoformat()}; it is "
            "back with the group's consumers.",
            message_id=message_id,
            replayed_at=replayed_at.isoformat(),
        )


class DeadLetterView(MessageView, kw_only=True):
    """One entry of the queue: the original message, why it failed and when."""

    error: str
    attempts: int
    first_delivered_at: datetime
    dead_at: datetime


class DeadLetterPage(msgspec.Struct, rename="camel"):
    """Entries oldest first; ``nextAfter`` continues the listing (null at its end)."""

    messages: list[DeadLetterView]
    depth: int
    next_after: str | None


class ReplayRequest(msgspec.Struct, forbid_unknown_fields=True):
    """``POST …/dlq/replay``: at most ``count`` dead letters, oldest first (all when absent)."""

    count: Annotated[int, msgspec.Meta(ge=1, le=BIGINT_MAX)] | None = None


class Replayed(msgspec.Struct, rename="camel"):
    """What a replay put back in front of the group's consumers."""

    replayed: int


async def inspect(conn: Conn, ref: GroupRef, limit: int, after: str | None) -> DeadLetterPage:
    """Up to ``limit`` entries after the entry ``after`` (a message id), and the queue's depth."""
    if not 1 <= limit <= MAX_PAGE:
        raise ValidationFailed(f"limit must be between 1 and {MAX_PAGE}", field="limit")
    start = _START if after is None else await _cursor(conn, ref, after)
    params = {
        "group_id": ref.id,
        "after_dead_at": start[0],
        "after_partition": start[1],
        "after_offset": start[2],
        "limit": limit,
    }
    rows = await (await conn.execute(q.SELECT_PENDING, params)).fetchall()
    depth = await dead_letter_depth(conn, ref.id)
    views = [_view(ref, row) for row in rows]
    more = len(views) == limit
    return DeadLetterPage(views, depth, views[-1].message_id if more else None)


async def _cursor(conn: Conn, ref: GroupRef, after: str) -> tuple[datetime, int, int]:
    """Where the entry ``after`` sorts; it must be (or have been) in this group's queue."""
    parsed = parse_message_id(ref.topic_id, after)
    row = None
    if parsed is not None:
        where = _entry(ref, *parsed)
        row = await (await conn.execute(q.SELECT_ENTRY, where)).fetchone()
    if parsed is None or row is None:
        raise ValidationFailed(
            f"after: '{after}' is not a dead letter of this group", field="after"
        )
    return row["dead_at"], parsed[0], parsed[1]


def _view(ref: GroupRef, row: dict[str, Any]) -> DeadLetterView:
    """The wire shape of a ``dead_letters`` row."""
    key = row["message_key"]
    return DeadLetterView(
        message_id=message_id(ref.topic_id, row["partition"], row["offset"]),
        topic=ref.topic,
        partition=row["partition"],
        offset=row["offset"],
        data=msgspec.Raw(bytes(row["value"])),
        key=None if key is None else bytes(key).decode(errors="replace"),
        headers=row["headers"],
        timestamp=iso_timestamp(row["published_at_ms"]),
        fairness_key=row["fairness_key"],
        throttle_keys=row["throttle_keys"] or None,
        error=row["error"],
        attempts=row["attempts"],
        first_delivered_at=row["first_delivered_at"],
        dead_at=row["dead_at"],
    )


async def replay_one(conn: Conn, ref: GroupRef, text: str) -> Replayed:
    """Deliver one dead letter to the group again (404 if not queued, 409 if replayed)."""
    partition, offset = _where(ref, text)
    where = _entry(ref, partition, offset)
    await conn.execute(dq.LOCK_GROUP_PARTITION, where)
    rows = await (await conn.execute(q.REPLAY_ONE, where)).fetchall()
    if not rows:
        entry = await (await conn.execute(q.SELECT_ENTRY, where)).fetchone()
        if entry is None or entry["replayed_at"] is None:
            raise DeadLetterNotFound(text)
        raise DeadLetterReplayed(text, entry["replayed_at"])
    await _wake(conn, ref, [partition])
    return Replayed(1)


async def replay_all(conn: Conn, ref: GroupRef, count: int | None = None) -> Replayed:
    """Deliver the group's dead letters again, oldest first, a batch per transaction: every one,
    or at most ``count`` (Fila's counted redrive); how many.

    It stops once it has replayed as many as the queue held when it began, so entries that
    fail again while it runs are not replayed round and round.
    """
    left, total = await dead_letter_depth(conn, ref.id), 0
    if count is not None:
        left = min(left, count)
    while left > 0:
        await conn.execute(gq.LOCK_ALL_GROUP_PARTITIONS, {"group_id": ref.id})
        params = {"group_id": ref.id, "batch": min(left, REPLAY_BATCH)}
        rows = await (await conn.execute(q.REPLAY_BATCH, params)).fetchall()
        if not rows:
            break
        await _wake(conn, ref, sorted({row["partition"] for row in rows}))
        await conn.commit()
        total, left = total + len(rows), left - len(rows)
    return Replayed(total)


def _where(ref: GroupRef, text: str) -> tuple[int, int]:
    """``(partition, offset)`` of a message id of the group's topic (404 for anything else)."""
    parsed = parse_message_id(ref.topic_id, text)
    if parsed is None:
        raise DeadLetterNotFound(text)
    return parsed


def _entry(ref: GroupRef, partition: int, offset: int) -> dict[str, Any]:
    return {"group_id": ref.id, "partition": partition, "offset": offset}


async def _wake(conn: Conn, ref: GroupRef, partitions: list[int]) -> None:
    """Wake the group's waiting consumers of these partitions when the transaction commits."""
    payload = msgspec.json.encode([[ref.topic_id, p, -1] for p in partitions]).decode()
    await conn.execute(gq.WAKE_CONSUMERS, {"payload": payload})
