"""Classic consumer groups (Kafka's JoinGroup/SyncGroup protocol), with their state in PostgreSQL
so that any replica coordinates any group.

A group is Empty, PreparingRebalance (members must join again before a deadline),
CompletingRebalance (a generation is formed; its leader computes the assignments) or Stable.
Every change happens in a transaction holding the group row's lock, on whichever replica the
client reached. A JoinGroup or a follower's SyncGroup then waits for the rest of the group: it
re-reads the group when this process changes it (an in-process wake-up) and at least every
:data:`POLL_S` otherwise (a member that reached another replica), and the first waiter to see the
rebalance deadline pass completes the generation without the members that did not rejoin.

The coordinator stores opaque protocol metadata and assignments (the clients' own assignors run
in the group leader); it never interprets them. Committed offsets live in ``consumer_groups``
and ``group_partitions`` rows with protocol ``kafka``, one per topic the group committed on, so
the REST API lists the group with its lag and its offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from core.db import AsyncPool, Conn
from data_plane.groups import queries as q
from tenants.ids import new_id

POLL_S = 0.1
MIN_REBALANCE_MS = 100
EMPTY, PREPARING, COMPLETING, STABLE = (
    "Empty",
    "PreparingRebalance",
    "CompletingRebalance",
    "Stable",
)


class GroupError(Exception):
    """A classic-group request refused; ``code`` is the Kafka error name."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(message or code)
        self.code = code


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """What a member sends to join (Kafka's JoinGroup fields)."""

    group: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]


@dataclass(frozen=True, slots=True)
class Member:
    """A member as JoinGroup (to the leader) and DescribeGroups show it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class Joined:
    """A JoinGroup answer: the generation, its protocol and leader; members for the leader."""

    generation: int
    protocol_type: str
    protocol_name: str
    leader_id: str
    member_id: str
    members: list[Member]


@dataclass(frozen=True, slots=True)
class GroupView:
    """A group as DescribeGroups shows it."""

    name: str
    state: str
    protocol_type: str
    protocol_name: str
    members: list[Member]


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """One committed offset of a Kafka group."""

    topic: str
    partition: int
    offset: int
    metadata: str


@dataclass
class _Wakeups:
    events: dict[tuple[str, str], asyncio.Event] = field(
        default_factory=lambda: defaultdict(asyncio.Event)
    )

    def wake(self, environment_id: str, group: str) -> None:
        event = self.events.pop((environment_id, group), None)
        if event is not None:
            event.set()

    async def wait(self, environment_id: str, group: str, timeout_s: float) -> None:
        event = self.events[(environment_id, group)]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout_s)


class ClassicGroups:
    """The group coordinator of one process; every replica runs one over the same tables."""

    def __init__(self, pool: AsyncPool) -> None:
        self.pool = pool
        self._wakeups = _Wakeups()

    # --- JoinGroup ---------------------------------------------------------------------------

    async def join(self, environment_id: str, request: JoinRequest) -> Joined:
        """Join (or rejoin) and wait until the generation forms; members only for the leader."""
        member_id = request.member_id or f"{request.client_id or 'member'}-{secrets.token_hex(8)}"
        async with self.pool.connection() as conn, conn.transaction():
            group = await _lock(conn, environment_id, request.group)
            members = await _members(conn, group["id"])
            if request.member_id and request.member_id not in members:
                raise GroupError("UNKNOWN_MEMBER_ID", f"{request.member_id} is not a member")
            if members and group["protocol_type"] not in ("", request.protocol_type):
                raise GroupError("INCONSISTENT_GROUP_PROTOCOL")
            previous = members[member_id]["join_generation"] if member_id in members else 0
            await _evict_silent(conn, group, members, keep=member_id)
            if group["state"] != PREPARING:
                await self._start_rebalance(conn, group, request.protocol_type)
            await conn.execute(
                q.KAFKA_UPSERT_MEMBER, _member_params(group["id"], member_id, request)
            )
            await self._try_complete(conn, environment_id, request.group)
        self._wakeups.wake(environment_id, request.group)
        deadline = time.monotonic() + request.rebalance_timeout_ms / 1000 + 5
        return await self._await_generation(
            environment_id, request.group, member_id, previous, deadline
        )

    async def _await_generation(
        self, environment_id: str, group_name: str, member_id: str, previous: int, deadline: float
    ) -> Joined:
        while True:
            async with self.pool.connection() as conn:
                group = await _select(conn, environment_id, group_name)
                members = await _members(conn, group["id"]) if group else {}
            if group is None or member_id not in members:
                raise GroupError("UNKNOWN_MEMBER_ID", "removed from the group while joining")
            me = members[member_id]
            if me["join_generation"] > previous:
                return _joined(group, members, member_id, me["join_generation"])
            late = [row for row in members.values() if not row["joined"]]
            if group["deadline_passed"] or any(row["silent"] for row in late):
                async with self.pool.connection() as conn, conn.transaction():
                    await self._try_complete(conn, environment_id, group_name)
                continue
            if time.monotonic() > deadline:
                raise GroupError("REBALANCE_IN_PROGRESS", "the group did not form in time")
            await self._wakeups.wait(environment_id, group_name, POLL_S)

    async def _start_rebalance(self, conn: Conn, group: dict[str, Any], protocol_type: str) -> None:
        params = {
            "group_id": group["id"],
            "min_timeout_ms": MIN_REBALANCE_MS,
            "protocol_type": protocol_type,
        }
        await conn.execute(q.KAFKA_START_REBALANCE, params)

    async def _try_complete(self, conn: Conn, environment_id: str, group_name: str) -> None:
        """Form the next generation if every member joined or the deadline passed."""
        group = await _lock(conn, environment_id, group_name)
        if group["state"] != PREPARING:
            return
        members = await _members(conn, group["id"])
        late = [m for m, row in members.items() if not row["joined"]]
        if not group["deadline_passed"]:  # only the silent ones are dropped before it
            late = [m for m in late if members[m]["silent"]]
            if len(late) < sum(1 for row in members.values() if not row["joined"]):
                if late:
                    await conn.execute(
                        q.KAFKA_DELETE_MEMBERS, {"group_id": group["id"], "member_ids": late}
                    )
                return
        if late:
            await conn.execute(
                q.KAFKA_DELETE_MEMBERS, {"group_id": group["id"], "member_ids": late}
            )
        joined = {m: row for m, row in members.items() if row["joined"]}
        if not joined:
            await conn.execute(q.KAFKA_COMPLETE_JOIN, _completion(group, EMPTY, "", None, None))
            return
        protocol = _choose_protocol(list(joined.values()))
        if protocol is None:
            raise GroupError("INCONSISTENT_GROUP_PROTOCOL", "no protocol every member supports")
        leader = group["leader_id"] if group["leader_id"] in joined else next(iter(joined))
        await conn.execute(
            q.KAFKA_COMPLETE_JOIN,
            _completion(group, COMPLETING, group["protocol_type"], protocol, leader),
        )
        self._wakeups.wake(environment_id, group_name)

    # --- SyncGroup, Heartbeat, LeaveGroup ----------------------------------------------------

    async def sync(
        self,
        environment_id: str,
        group_name: str,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes],
    ) -> bytes:
        """The member's assignment for ``generation`` (the leader brings everyone's)."""
        async with self.pool.connection() as conn, conn.transaction():
            group, _ = await self._checked(conn, environment_id, group_name, member_id, generation)
            if group["state"] == COMPLETING and group["leader_id"] == member_id:
                ids = list(assignments)
                await conn.execute(
                    q.KAFKA_SET_ASSIGNMENTS,
                    {
                        "group_id": group["id"],
                        "member_ids": ids,
                        "assignments": [assignments[i] for i in ids],
                    },
                )
                await conn.execute(q.KAFKA_SET_STATE, {"group_id": group["id"], "state": STABLE})
        self._wakeups.wake(environment_id, group_name)
        while True:
            async with self.pool.connection() as conn:
                now = await _select(conn, environment_id, group_name)
                members = await _members(conn, now["id"]) if now else {}
            if now is None or member_id not in members:
                raise GroupError("UNKNOWN_MEMBER_ID")
            if now["generation"] != generation or now["state"] == PREPARING:
                raise GroupError("REBALANCE_IN_PROGRESS")
            if now["state"] == STABLE:
                return bytes(members[member_id]["assignment"] or b"")
            await self._wakeups.wait(environment_id, group_name, POLL_S)

    async def heartbeat(
        self, environment_id: str, group_name: str, member_id: str, generation: int
    ) -> None:
        """Keep the member alive; :class:`GroupError` REBALANCE_IN_PROGRESS means rejoin."""
        async with self.pool.connection() as conn, conn.transaction():
            group, _ = await self._checked(conn, environment_id, group_name, member_id, generation)
            await conn.execute(
                q.KAFKA_TOUCH_MEMBER, {"group_id": group["id"], "member_id": member_id}
            )
            state = group["state"]
        if state == PREPARING:
            raise GroupError("REBALANCE_IN_PROGRESS")

    async def leave(self, environment_id: str, group_name: str, member_ids: list[str]) -> list[str]:
        """Remove members; the others rebalance. Returns the ids that were not members."""
        async with self.pool.connection() as conn, conn.transaction():
            group = await _lock(conn, environment_id, group_name)
            members = await _members(conn, group["id"])
            known = [m for m in member_ids if m in members]
            if known:
                await conn.execute(
                    q.KAFKA_DELETE_MEMBERS, {"group_id": group["id"], "member_ids": known}
                )
                await self._after_removal(conn, group, len(members) - len(known))
        self._wakeups.wake(environment_id, group_name)
        return [m for m in member_ids if m not in known]

    async def _after_removal(self, conn: Conn, group: dict[str, Any], remaining: int) -> None:
        if remaining == 0:
            await conn.execute(q.KAFKA_COMPLETE_JOIN, _completion(group, EMPTY, "", None, None))
        elif group["state"] != PREPARING:
            await self._start_rebalance(conn, group, group["protocol_type"])

    async def _checked(
        self, conn: Conn, environment_id: str, group_name: str, member_id: str, generation: int
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """The locked group after evicting silent members; the caller must be a member of
        ``generation``."""
        group = await _lock(conn, environment_id, group_name)
        members = await _members(conn, group["id"])
        if member_id not in members:
            raise GroupError("UNKNOWN_MEMBER_ID")
        evicted = await _evict_silent(conn, group, members, keep=member_id)
        if evicted:
            await self._after_removal(conn, group, len(members) - len(evicted))
            group = await _lock(conn, environment_id, group_name)
        if generation != group["generation"]:
            raise GroupError("ILLEGAL_GENERATION")
        return group, members

    # --- describe, list, offsets -------------------------------------------------------------

    async def describe(self, environment_id: str, group_name: str) -> GroupView:
        """A group's state and members (Dead when it does not exist)."""
        async with self.pool.connection() as conn:
            group = await _select(conn, environment_id, group_name)
            members = await _members(conn, group["id"]) if group else {}
        if group is None:
            return GroupView(group_name, "Dead", "", "", [])
        protocol = group["protocol_name"] or ""
        return GroupView(
            group_name,
            group["state"],
            group["protocol_type"],
            protocol,
            [_member(member_id, row, protocol) for member_id, row in members.items()],
        )

    async def list_groups(self, environment_id: str) -> list[tuple[str, str, str]]:
        """``(name, protocol type, state)`` of every Kafka group of the environment."""
        async with self.pool.connection() as conn:
            rows = await (
                await conn.execute(q.KAFKA_LIST_GROUPS, {"environment_id": environment_id})
            ).fetchall()
        return [(row["name"], row["protocol_type"], row["state"]) for row in rows]

    async def check_commit(
        self, environment_id: str, group_name: str, member_id: str, generation: int
    ) -> None:
        """A commit by a member of the current generation, or by an admin of an empty group."""
        async with self.pool.connection() as conn, conn.transaction():
            if generation < 0 and not member_id:
                group = await _lock(conn, environment_id, group_name)
                if await _members(conn, group["id"]):
                    raise GroupError("UNKNOWN_MEMBER_ID", "the group has active members")
                return
            group, _ = await self._checked(conn, environment_id, group_name, member_id, generation)
            if group["state"] != STABLE:
                raise GroupError("REBALANCE_IN_PROGRESS")
            await conn.execute(
                q.KAFKA_TOUCH_MEMBER, {"group_id": group["id"], "member_id": member_id}
            )

    async def commit_offsets(
        self,
        environment_id: str,
        group_name: str,
        topic_id: str,
        offsets: list[tuple[int, int, str]],
    ) -> None:
        """Set the group's committed offsets ``(partition, offset, metadata)`` on one topic."""
        async with self.pool.connection() as conn, conn.transaction():
            params = {
                "id": new_id("grp"),
                "environment_id": environment_id,
                "topic_id": topic_id,
                "name": group_name,
            }
            row = await (await conn.execute(q.KAFKA_OFFSET_GROUP, params)).fetchone()
            assert row is not None
            if row["protocol"] != "kafka":
                raise GroupError(
                    "INCONSISTENT_GROUP_PROTOCOL",
                    f"'{group_name}' is a REST consumer group of this topic",
                )
            await conn.execute(
                q.KAFKA_COMMIT_OFFSETS,
                {
                    "group_id": row["id"],
                    "partitions": [p for p, _, _ in offsets],
                    "offsets": [o for _, o, _ in offsets],
                    "metadata": [m for _, _, m in offsets],
                },
            )

    async def committed(self, environment_id: str, group_name: str) -> list[CommittedOffset]:
        """Every offset the Kafka group committed, on the environment's active topics."""
        async with self.pool.connection() as conn:
            rows = await (
                await conn.execute(
                    q.KAFKA_SELECT_OFFSETS, {"environment_id": environment_id, "name": group_name}
                )
            ).fetchall()
        return [
            CommittedOffset(r["topic"], r["partition"], r["committed_offset"], r["commit_metadata"])
            for r in rows
        ]


# --- helpers ----------------------------------------------------------------------------------


async def _lock(conn: Conn, environment_id: str, name: str) -> dict[str, Any]:
    params = {"id": new_id("kgr"), "environment_id": environment_id, "name": name}
    row = await (await conn.execute(q.KAFKA_LOCK_GROUP, params)).fetchone()
    assert row is not None
    return dict(row)


async def _select(conn: Conn, environment_id: str, name: str) -> dict[str, Any] | None:
    params = {"environment_id": environment_id, "name": name}
    row = await (await conn.execute(q.KAFKA_SELECT_GROUP, params)).fetchone()
    return None if row is None else dict(row)


async def _members(conn: Conn, group_id: str) -> dict[str, dict[str, Any]]:
    rows = await (await conn.execute(q.KAFKA_SELECT_MEMBERS, {"group_id": group_id})).fetchall()
    return {row["member_id"]: dict(row) for row in rows}


async def _evict_silent(
    conn: Conn, group: dict[str, Any], members: dict[str, dict[str, Any]], keep: str
) -> list[str]:
    """Drop members silent past their session timeout (never the caller)."""
    silent = [m for m, row in members.items() if row["silent"] and m != keep]
    if silent:
        await conn.execute(q.KAFKA_DELETE_MEMBERS, {"group_id": group["id"], "member_ids": silent})
        for member_id in silent:
            members.pop(member_id)
    return silent


def _member_params(group_id: str, member_id: str, request: JoinRequest) -> dict[str, Any]:
    return {
        "group_id": group_id,
        "member_id": member_id,
        "group_instance_id": request.group_instance_id,
        "client_id": request.client_id,
        "client_host": request.client_host,
        "session_timeout_ms": request.session_timeout_ms,
        "rebalance_timeout_ms": request.rebalance_timeout_ms,
        "protocol_names": [name for name, _ in request.protocols],
        "protocol_metadata": [metadata for _, metadata in request.protocols],
    }


def _choose_protocol(members: list[dict[str, Any]]) -> str | None:
    """The first protocol of the first member that every member supports."""
    common = set(members[0]["protocol_names"])
    for row in members[1:]:
        common &= set(row["protocol_names"])
    for name in members[0]["protocol_names"]:
        if name in common:
            return str(name)
    return None


def _completion(
    group: dict[str, Any], state: str, protocol_type: str, protocol: str | None, leader: str | None
) -> dict[str, Any]:
    return {
        "group_id": group["id"],
        "generation": group["generation"] + 1,
        "state": state,
        "protocol_type": protocol_type,
        "protocol_name": protocol,
        "leader_id": leader,
    }


def _metadata(row: dict[str, Any], protocol: str) -> bytes:
    for name, metadata in zip(row["protocol_names"], row["protocol_metadata"], strict=True):
        if name == protocol:
            return bytes(metadata)
    return b""


def _member(member_id: str, row: dict[str, Any], protocol: str) -> Member:
    return Member(
        member_id,
        row["group_instance_id"],
        row["client_id"],
        row["client_host"],
        _metadata(row, protocol),
        bytes(row["assignment"] or b""),
    )


def _joined(
    group: dict[str, Any], members: dict[str, dict[str, Any]], member_id: str, generation: int
) -> Joined:
    protocol = group["protocol_name"] or ""
    leader = group["leader_id"] or ""
    listed = []
    if leader == member_id:
        listed = [
            _member(m, row, protocol)
            for m, row in members.items()
            if row["join_generation"] == generation
        ]
    return Joined(generation, group["protocol_type"], protocol, leader, member_id, listed)
