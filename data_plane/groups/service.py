"""Consumer-group configuration and membership: join, heartbeat, leave, eviction, rebalance.

Every membership change takes the group row's lock, evicts members silent past their session
timeout, and — when the set of members or partitions changed — bumps the generation and
recomputes ownership with the sticky assignor. Members learn of a new generation from their
heartbeat (``shouldRejoin``) and rejoin to get their partitions. Because a group whose members
only pull or stream has no membership changes, :func:`sweep_groups` (a periodic Celery
task) does the same for every group with a silent member or a topic that grew.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import msgspec
import psycopg

from core.db import Conn
from core.errors import ClientError, Conflict, NotFound, ValidationFailed
from data_plane.groups import queries as q
from data_plane.groups.assignment import assign
from data_plane.groups.pulse import PULSE_GAP_S
from observability.logging import get_logger
from tenants.ids import new_id

HEARTBEAT_DIVISOR = 3  # heartbeat three times per session timeout, as Kafka clients do
_DURATION = re.compile(r"^([0-9]+)(ms|s|m|h)$")  # ASCII digits only, as documented
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
log = get_logger("queuecore.groups")


class GroupTopicNotFound(NotFound):
    """The topic named in the path does not exist in the caller's environment."""

    code = "TOPIC_NOT_FOUND"

    def __init__(self, topic: str) -> None:
        super().__init__(
            f"The topic '{topic}' does not exist in the current environment.", topic=topic
        )


class GroupNotFound(NotFound):
    """No such consumer group on this topic."""

    code = "GROUP_NOT_FOUND"

    def __init__(self, group: str) -> None:
        super().__init__(f"The consumer group '{group}' does not exist on this topic.", group=group)


class MemberNotFound(NotFound):
    """The member left or was evicted; it must join again."""

    code = "MEMBER_NOT_FOUND"

    def __init__(self, member_id: str) -> None:
        super().__init__(
            f"Member '{member_id}' is not in this group (it left or was evicted); join again.",
            member_id=member_id,
        )


class GroupHasActiveMembers(Conflict):
    """An operation that needs a stopped group found members."""

    code = "GROUP_HAS_ACTIVE_MEMBERS"


class KafkaGroup(Conflict):
    """REST members cannot join a group whose offsets Kafka clients commit."""

    def __init__(self, group: str) -> None:
        super().__init__(
            f"Group '{group}' is a Kafka consumer group on this topic (Kafka clients commit its "
            "offsets); REST members join a group of another name.",
            group=group,
        )


class PushGroup(Conflict):
    """Members cannot join a push group: its pushers deliver it (docs/push.md)."""

    code = "PUSH_GROUP"

    def __init__(self, group: str) -> None:
        super().__init__(
            f"Group '{group}' is a push group: QueueCore delivers its messages to its endpoint, "
            'so it has no members. Turn push off (PUT with "push": null) or join another group.',
            group=group,
        )


class NotAPushGroup(Conflict):
    """A pusher tried to join a group whose push was turned off."""

    code = "NOT_A_PUSH_GROUP"

    def __init__(self, group: str) -> None:
        super().__init__(f"Group '{group}' has no push endpoint.", group=group)


class InvalidDuration(ClientError):
    """A duration string such as ``30s`` could not be read."""

    code = "VALIDATION_ERROR"


# The ranges the database accepts (migration 0005), checked first so a client gets a clear 422.
ACK_TIMEOUT_MS = (1_000, 43_200_000)  # 1 s .. 12 h
SESSION_TIMEOUT_MS = (1_000, 600_000)  # 1 s .. 10 min
RETRY_DELAY_MS = (0, 86_400_000)  # 0 .. 24 h


def parse_duration_ms(value: str | int, field: str, bounds_ms: tuple[int, int]) -> int:
    """``"500ms"``, ``"30s"``, ``"5m"``, ``"1h"`` or milliseconds as an integer, within bounds."""
    if isinstance(value, int) and not isinstance(value, bool):
        ms = value
    else:
        match = _DURATION.match(str(value).strip())
        if not match:
            raise ValidationFailed(
                f"{field} must look like '500ms', '30s', '5m' or '1h'", field=field
            )
        ms = int(match.group(1)) * _UNIT_MS[match.group(2)]
    low, high = bounds_ms
    if not low <= ms <= high:
        raise ValidationFailed(
            f"{field} must be between {format_duration_ms(low) if low else '0'} and "
            f"{format_duration_ms(high)}",
            field=field,
        )
    return ms


def format_duration_ms(value: int) -> str:
    """The shortest exact unit: ``30000`` → ``"30s"``."""
    for unit in ("h", "m", "s"):
        if value and value % _UNIT_MS[unit] == 0:
            return f"{value // _UNIT_MS[unit]}{unit}"
    return f"{value}ms"


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The tunable settings of a group."""

    start_from: str = "latest"
    ack_timeout_ms: int = 30_000
    max_in_flight: int = 1000
    max_retries: int = 5
    retry_delay_ms: int = 30_000
    alert_threshold: int | None = None
    session_timeout_ms: int = 30_000


@dataclass(frozen=True, slots=True)
class JoinResult:
    """What a member needs after joining."""

    member_id: str
    generation: int
    assignments: list[int]
    heartbeat_interval_ms: int
    session_timeout_ms: int
    max_in_flight: int = 1000  # the member's window: the smaller of the group's and its own
    ack_timeout_ms: int = 30_000  # the group's: how long a delivered message stays leased
    delivery: str = "exactly-once"  # the topic's


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    """The group's generation and whether this member must rejoin to learn its partitions."""

    generation: int
    should_rejoin: bool
    ack_timeout_ms: int = 30_000


async def topic_of(conn: Conn, environment_id: str, topic: str) -> dict[str, Any]:
    """The active topic named ``topic`` in the environment, or ``TOPIC_NOT_FOUND``."""
    row = await (
        await conn.execute(q.SELECT_ACTIVE_TOPIC, {"environment_id": environment_id, "name": topic})
    ).fetchone()
    if row is None:
        raise GroupTopicNotFound(topic)
    return dict(row)


def _check_name(group: str) -> None:
    if not GROUP_NAME.match(group):
        raise ValidationFailed(
            "group names are 1-128 characters of letters, digits, '.', '_' and '-'", field="group"
        )


async def _locked_group(
    conn: Conn, environment_id: str, topic_id: str, group: str, create: bool
) -> dict[str, Any]:
    _check_name(group)
    if create:
        await conn.execute(
            q.INSERT_GROUP,
            {
                "id": new_id("grp"),
                "environment_id": environment_id,
                "topic_id": topic_id,
                "name": group,
            },
        )
    row = await (await conn.execute(q.LOCK_GROUP, {"topic_id": topic_id, "name": group})).fetchone()
    if row is None:
        raise GroupNotFound(group)
    return dict(row)


async def configure(
    conn: Conn, environment_id: str, topic: str, group: str, config: GroupConfig
) -> dict[str, Any]:
    """Create or update a group's configuration."""
    topic_row = await topic_of(conn, environment_id, topic)
    row = await _locked_group(conn, environment_id, topic_row["id"], group, create=True)
    params = {
        "id": row["id"],
        **{field: getattr(config, field) for field in GroupConfig.__dataclass_fields__},
    }
    await conn.execute(q.UPDATE_GROUP_CONFIG, params)
    await conn.execute(
        q.SEED_GROUP_PARTITIONS,
        {"group_id": row["id"], "topic_id": topic_row["id"], "start_from": config.start_from},
    )
    return await describe(conn, environment_id, topic, group)


async def delete(conn: Conn, environment_id: str, topic: str, group: str) -> None:
    """Remove a group, its members and offsets."""
    topic_row = await topic_of(conn, environment_id, topic)
    row = await (
        await conn.execute(q.DELETE_GROUP, {"topic_id": topic_row["id"], "name": group})
    ).fetchone()
    if row is None:
        raise GroupNotFound(group)


async def _rebalance(
    conn: Conn, group_row: dict[str, Any], topic_row: dict[str, Any], force: bool
) -> int:
    """Evict the silent, seed new partitions, and reassign if anything changed; returns the generation."""
    generation, _, _ = await _rebalanced(conn, group_row, topic_row, force)
    return generation


async def _rebalanced(
    conn: Conn, group_row: dict[str, Any], topic_row: dict[str, Any], force: bool
) -> tuple[int, list[str], int]:
    """:func:`_rebalance`, also saying which members it evicted and how many partitions it added."""
    evicted = await _evict_silent(conn, group_row["id"])
    seeded = await _seed(conn, group_row, topic_row)
    if not (force or evicted or seeded):
        return int(group_row["generation"]), evicted, seeded
    return await _assign_all(conn, group_row, topic_row), evicted, seeded


async def _evict_silent(conn: Conn, group_id: str) -> list[str]:
    """Remove the members silent past their session timeout and end their leases; their ids."""
    params: dict[str, Any] = {"group_id": group_id, "gap_s": PULSE_GAP_S}
    silent = [r["id"] for r in await (await conn.execute(q.LOCK_SILENT_MEMBERS, params)).fetchall()]
    if silent:
        await _remove(conn, group_id, silent)
    return silent


async def _remove(conn: Conn, group_id: str, member_ids: list[str]) -> None:
    """Delete members and end their leases, the group's partitions locked first (in order)."""
    params = {"group_id": group_id, "member_ids": member_ids}
    await conn.execute(q.LOCK_ALL_GROUP_PARTITIONS, params)
    await conn.execute(q.DELETE_MEMBERS, params)
    await _release(conn, group_id, member_ids)


async def _seed(conn: Conn, group_row: dict[str, Any], topic_row: dict[str, Any]) -> int:
    """Give the group the partitions its topic gained (at its ``startFrom``); how many."""
    seeded = await conn.execute(
        q.SEED_GROUP_PARTITIONS,
        {
            "group_id": group_row["id"],
            "topic_id": topic_row["id"],
            "start_from": group_row["start_from"],
        },
    )
    return seeded.rowcount


async def _assign_all(conn: Conn, group_row: dict[str, Any], topic_row: dict[str, Any]) -> int:
    """Sticky reassignment of every partition, a new generation, waiting consumers woken."""
    members = [
        m["id"]
        for m in await (
            await conn.execute(q.SELECT_MEMBERS, {"group_id": group_row["id"]})
        ).fetchall()
    ]
    rows = await (
        await conn.execute(
            q.SELECT_GROUP_PARTITIONS, {"group_id": group_row["id"], "topic_id": topic_row["id"]}
        )
    ).fetchall()
    previous: dict[str, list[int]] = {}
    for row in rows:
        if row["owner_member_id"]:
            previous.setdefault(row["owner_member_id"], []).append(row["partition"])
    owners = {p: m for m, held in assign(len(rows), members, previous).items() for p in held}
    partitions = [row["partition"] for row in rows]
    await conn.execute(
        q.SET_OWNERS,
        {
            "group_id": group_row["id"],
            "partitions": partitions,
            "owners": [owners.get(p) for p in partitions],
        },
    )
    bumped = await (await conn.execute(q.BUMP_GENERATION, {"id": group_row["id"]})).fetchone()
    assert bumped is not None
    # Waiting consumers listen for their own partitions only: after a reassignment, wake them
    # all (partition -1) so each learns its partitions now rather than at its next keep-alive.
    await conn.execute(
        q.WAKE_CONSUMERS, {"payload": msgspec.json.encode([[topic_row["id"], -1, -1]]).decode()}
    )
    return int(bumped["generation"])


async def _assignments_of(conn: Conn, group_id: str, topic_id: str, member_id: str) -> list[int]:
    rows = await (
        await conn.execute(q.SELECT_GROUP_PARTITIONS, {"group_id": group_id, "topic_id": topic_id})
    ).fetchall()
    return [row["partition"] for row in rows if row["owner_member_id"] == member_id]


async def join(
    conn: Conn,
    environment_id: str,
    topic: str,
    group: str,
    member_id: str | None = None,
    client_id: str = "",
    session_timeout_ms: int | None = None,
    max_in_flight: int | None = None,
    pusher: bool = False,
) -> JoinResult:
    """Join (or rejoin with ``member_id``) a group, creating it with defaults if needed.

    ``max_in_flight`` is the member's own window (kept on a rejoin that gives none). A push
    group's only members are its ``pusher``s, and a pusher joins only a push group."""
    topic_row = await topic_of(conn, environment_id, topic)
    group_row = await _locked_group(conn, environment_id, topic_row["id"], group, create=not pusher)
    if group_row.get("protocol") == "kafka":
        raise KafkaGroup(group)
    await _check_push(conn, group_row["id"], group, pusher)
    timeout_ms = session_timeout_ms or int(group_row["session_timeout_ms"])
    known = member_id and (
        await (
            await conn.execute(q.TOUCH_MEMBER, {"id": member_id, "group_id": group_row["id"]})
        ).fetchone()
    )
    if member_id and not known:
        raise MemberNotFound(member_id)
    new_member = not member_id
    member_id = member_id or new_id("csr", 12)
    if new_member:
        params = {
            "id": member_id,
            "group_id": group_row["id"],
            "client_id": client_id,
            "session_timeout_ms": timeout_ms,
            "generation": group_row["generation"],
            "max_in_flight": max_in_flight,
        }
        await conn.execute(q.INSERT_MEMBER, params)
        if pusher:
            await conn.execute(q.MARK_PUSHER, {"id": member_id})
    window = await member_window(conn, group_row["id"], member_id, max_in_flight)
    generation = await _rebalance(conn, group_row, topic_row, force=new_member)
    await conn.execute(
        q.SYNC_MEMBER_GENERATION,
        {"id": member_id, "group_id": group_row["id"], "generation": generation},
    )
    assignments = await _assignments_of(conn, group_row["id"], topic_row["id"], member_id)
    return JoinResult(
        member_id,
        generation,
        assignments,
        max(timeout_ms // HEARTBEAT_DIVISOR, 100),
        timeout_ms,
        window,
        int(group_row["ack_timeout_ms"]),
        str(topic_row["delivery"]),
    )


async def _check_push(conn: Conn, group_id: str, group: str, pusher: bool) -> None:
    """Members join ordinary groups, pushers push groups."""
    is_push = await (await conn.execute(q.IS_PUSH_GROUP, {"group_id": group_id})).fetchone()
    if is_push and not pusher:
        raise PushGroup(group)
    if pusher and not is_push:
        raise NotAPushGroup(group)


async def member_window(
    conn: Conn, group_id: str, member_id: str, max_in_flight: int | None = None
) -> int:
    """The member's window, after setting its own to ``max_in_flight`` when given."""
    params = {"id": member_id, "group_id": group_id, "max_in_flight": max_in_flight}
    query = q.MEMBER_WINDOW if max_in_flight is None else q.SET_MEMBER_WINDOW
    row = await (await conn.execute(query, params)).fetchone()
    if row is None:
        raise MemberNotFound(member_id)
    return int(row["window"])


async def heartbeat(
    conn: Conn,
    environment_id: str,
    topic: str,
    group: str,
    member_id: str,
    max_in_flight: int | None = None,
) -> HeartbeatResult:
    """Keep a member alive; tells it to rejoin when the generation moved on.

    ``max_in_flight`` sets the member's window, as on a join."""
    topic_row = await topic_of(conn, environment_id, topic)
    group_row = await _locked_group(conn, environment_id, topic_row["id"], group, create=False)
    # The member row before the partitions, as a pull takes them: a rebalance locks every
    # partition of the group, and touching the member after it deadlocked with its own pull.
    # Only a member still within its session is touched; a silent one is evicted just below.
    params = {"id": member_id, "group_id": group_row["id"], "gap_s": PULSE_GAP_S}
    row = await (await conn.execute(q.TOUCH_LIVE_MEMBER, params)).fetchone()
    generation = await _rebalance(conn, group_row, topic_row, force=False)
    if row is None:
        raise MemberNotFound(member_id)
    if max_in_flight is not None:
        await member_window(conn, group_row["id"], member_id, max_in_flight)
    stale = int(row["generation"]) != generation
    return HeartbeatResult(generation, stale, int(group_row["ack_timeout_ms"]))


async def leave(conn: Conn, environment_id: str, topic: str, group: str, member_id: str) -> int:
    """Leave the group at once; its partitions go to the others. Returns the new generation."""
    topic_row = await topic_of(conn, environment_id, topic)
    group_row = await _locked_group(conn, environment_id, topic_row["id"], group, create=False)
    known = await conn.execute(q.LOCK_MEMBER, {"id": member_id, "group_id": group_row["id"]})
    if await known.fetchone() is None:
        raise MemberNotFound(member_id)
    await _remove(conn, group_row["id"], [member_id])
    return await _rebalance(conn, group_row, topic_row, force=True)


async def _release(conn: Conn, group_id: str, member_ids: list[str]) -> None:
    """End the leases of members that are gone, so the next owner gets their messages now."""
    params = {"group_id": group_id, "member_ids": member_ids}
    await conn.execute(q.RELEASE_LEASES, params)
    await conn.execute(q.RELEASE_RANGE_LEASES, params)


async def sweep(conn: Conn, environment_id: str, topic: str, group: str) -> int:
    """Evict silent members and rebalance if needed; returns the group's generation."""
    topic_row = await topic_of(conn, environment_id, topic)
    group_row = await _locked_group(conn, environment_id, topic_row["id"], group, create=False)
    return await _rebalance(conn, group_row, topic_row, force=False)


@dataclass(frozen=True, slots=True)
class SweepReport:
    """What one run of the periodic sweep did."""

    groups_swept: int = 0
    members_evicted: int = 0
    groups_grown: int = 0  # groups that got the partitions added to their topic

    def as_dict(self) -> dict[str, int]:
        """JSON-friendly (a Celery task result)."""
        return {
            "groupsSwept": self.groups_swept,
            "membersEvicted": self.members_evicted,
            "groupsGrown": self.groups_grown,
        }


async def sweep_groups(conn: Conn, topic_id: str | None = None) -> SweepReport:
    """Evict silent members and assign added partitions, in every group (of one topic if given).

    The membership operations do both lazily, so a group whose members only pull or stream
    would keep its silent members (and their partitions), and never consume the partitions
    added to its topic; a periodic task runs this. Each group gets its own transaction under
    the group row lock, as a heartbeat does, so it is safe beside joins and heartbeats and a
    second run finds nothing to do. Needs an autocommit connection.
    """
    if not conn.autocommit:
        raise ValueError("the sweep commits group by group: pass an autocommit connection")
    params = {"topic_id": topic_id, "gap_s": PULSE_GAP_S}
    rows = await (await conn.execute(q.GROUPS_TO_SWEEP, params)).fetchall()
    evicted = grown = 0
    for row in rows:
        try:
            async with conn.transaction():
                members, seeded = await _sweep_group(conn, row["id"])
        except psycopg.Error as exc:  # the next run retries; the other groups need not wait
            log.warning("group_sweep_failed", group_id=row["id"], error=type(exc).__name__)
            continue
        evicted, grown = evicted + members, grown + seeded
    return SweepReport(len(rows), evicted, grown)


async def _sweep_group(conn: Conn, group_id: str) -> tuple[int, bool]:
    """Evict one group's silent members, seed added partitions, reassign if either happened.

    Returns how many members were evicted and whether partitions were added.
    """
    group_row = await (await conn.execute(q.LOCK_GROUP_BY_ID, {"id": group_id})).fetchone()
    if group_row is None:  # deleted since it was listed
        return 0, False
    topic_row = await (
        await conn.execute(q.SELECT_ACTIVE_TOPIC_BY_ID, {"id": group_row["topic_id"]})
    ).fetchone()
    if topic_row is None:  # its topic is being deleted
        return 0, False
    generation, evicted, seeded = await _rebalanced(
        conn, dict(group_row), dict(topic_row), force=False
    )
    if evicted or seeded:
        log.info(
            "group_swept", group_id=group_id, evicted=evicted, added=seeded, generation=generation
        )
    return len(evicted), seeded > 0


async def describe(conn: Conn, environment_id: str, topic: str, group: str) -> dict[str, Any]:
    """Members, per-partition owner, committed offset and lag, and the configuration."""
    topic_row = await topic_of(conn, environment_id, topic)
    group_row = await _locked_group(conn, environment_id, topic_row["id"], group, create=False)
    generation = await _rebalance(conn, group_row, topic_row, force=False)
    members = await (await conn.execute(q.SELECT_MEMBERS, {"group_id": group_row["id"]})).fetchall()
    rows = await (
        await conn.execute(
            q.SELECT_GROUP_PARTITIONS, {"group_id": group_row["id"], "topic_id": topic_row["id"]}
        )
    ).fetchall()
    return {
        "group": group_row,
        "topic": topic_row,
        "generation": generation,
        "members": members,
        "partitions": rows,
        "dead_letters": await dead_letter_depth(conn, group_row["id"]),
        "push": await push_settings(conn, group_row["id"]),
    }


async def push_settings(conn: Conn, group_id: str) -> dict[str, Any] | None:
    """The group's ``group_push`` row (its endpoint and delivery settings), None if not a push group."""
    row = await (await conn.execute(q.SELECT_GROUP_PUSH, {"group_id": group_id})).fetchone()
    return None if row is None else dict(row)


async def dead_letter_depth(conn: Conn, group_id: str) -> int:
    """The depth of the group's dead-letter queue: its dead letters not replayed."""
    row = await (await conn.execute(q.COUNT_PENDING, {"group_id": group_id})).fetchone()
    return int(row["depth"]) if row else 0


async def list_groups(conn: Conn, environment_id: str, topic: str) -> list[dict[str, Any]]:
    """Every group of a topic with its member count and total lag."""
    topic_row = await topic_of(conn, environment_id, topic)
    return [
        dict(row)
        for row in await (
            await conn.execute(q.LIST_GROUPS, {"topic_id": topic_row["id"]})
        ).fetchall()
    ]


async def topic_stats(conn: Conn, topic_id: str) -> dict[str, int]:
    """Retained messages (depth), leased messages, live consumers and groups of a topic."""
    row = await (await conn.execute(q.TOPIC_STATS, {"topic_id": topic_id})).fetchone()
    assert row is not None
    return {key: int(value) for key, value in row.items()}
