"""What delivery works with: the group's ids and settings (cached), deliveries, ack outcomes."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from core.db import Conn
from core.errors import Conflict
from data_plane.delivery import queries as q
from data_plane.groups.service import GroupNotFound, topic_of
from data_plane.write.segment import Message

UNKNOWN_ACK = "unknown or superseded ackId: the message was delivered again or its ack id is wrong"
EXPIRED_ACK = "the lease expired: the message will be delivered again, so its work may be repeated"


class AckRejected(Conflict):
    """The ack id's lease is over: the message may be (or have been) delivered again."""

    code = "ACK_REJECTED"


class FairGroup(Exception):
    """The one-statement pull found a fair group: the pull takes the fair path instead."""


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
    partitions: int  # the topic's, when looked up: lease ids a pull sends when it knows no better
    fair: bool = False  # a fair group (or one still leaving fairness): pulls take the fair path
    on_failure: str | None = None  # the source of its onFailure hook, if it has one


@dataclass(frozen=True, slots=True)
class Pulled:
    """What a pull leased, with what a consumer that got nothing needs to wait for more."""

    ref: GroupRef  # with the group's settings as read by this pull
    deliveries: list[Delivery]
    partitions: frozenset[int]  # owned by the member at the pull
    wakeup: datetime | None  # the next lease expiry or due retry of those partitions
    session_timeout_ms: int  # of the member: a waiting consumer pulls again well within it
    full: bool = False  # the member holds maxInFlight messages: only an ack or nack makes room
    lease_s: float = 0.0  # in PostgreSQL: leasing (and committing) the offsets
    read_s: float = 0.0  # reading the leased messages (block cache, else S3)


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
        partitions=topic_row["partitions"],
        fair=bool(row["fair"]),
        on_failure=row["on_failure"],
    )


class GroupRefCache:
    """``(environment, topic, group) → GroupRef`` for ``ttl_s``: two lookups fewer per pull and ack.

    Correctness does not depend on it: a group id and its topic's delivery mode never change;
    a pull re-reads the group's settings and its topic's status in its first statement; and a
    caller that finds the member or the group gone forgets the entry and looks again
    (``control_plane.api.consume``), so a deleted or re-created group is noticed at once.
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
