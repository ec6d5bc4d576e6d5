"""Consumer-group administration through the door: configuration, membership, committed
offsets (read, seek, reset), lag over time, and the dashboard's view of a group."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Any

import msgspec

from core.db import AsyncPool, Conn
from core.sealed import Sealer
from data_plane import delivery
from data_plane.delivery import GroupRef, GroupRefCache
from data_plane.groups import fairness, lag
from data_plane.groups import service as groups
from data_plane.groups.lag import LagSeries
from data_plane.groups.push_schemas import PushConfigRequest
from data_plane.groups.schemas import (
    GroupConfigRequest,
    GroupSummary,
    GroupView,
    HeartbeatResponse,
    JoinRequest,
    JoinResponse,
)
from data_plane.push import config as push_config
from data_plane.service.scope import Caller, audit_target, in_group
from data_plane.service.views import group_config, group_view
from data_plane.topics import overview
from data_plane.topics.overview import GroupDetail
from tenants.team import audit
from tenants.team.audit import Actor


class Groups:
    """The consumer groups of the caller's environment's topics and their members.

    A configured or deleted group is seen by this process's pulls and acks at once (its cached
    ref is dropped); another replica's cache notices on the next miss (``data_plane.delivery``).
    """

    def __init__(
        self, db: AsyncPool, refs: GroupRefCache, sealer: Sealer, allow_private: bool
    ) -> None:
        self._db = db
        self._refs = refs
        self._sealer = sealer  # seals the push signing secrets it makes
        self._allow_private = allow_private  # whether push endpoints may be private addresses

    async def list_all(self, caller: Caller, topic: str) -> list[GroupSummary]:
        """The topic's groups with their live consumers, lag and dead letters."""
        async with self._db.connection() as conn:
            rows = await groups.list_groups(conn, caller.environment_id, topic)
        return [
            GroupSummary(
                name=r["name"],
                consumers=r["consumers"],
                lag=int(r["lag"]),
                dead_letters=r["dead_letters"],
            )
            for r in rows
        ]

    async def settings(self, caller: Caller, topic: str, group: str) -> GroupRef:
        """The group's delivery settings (ack timeout, retries, backoff), read afresh."""
        async with self._db.connection() as conn:
            return await delivery.group_ref(conn, caller.environment_id, topic, group)

    async def describe(self, caller: Caller, topic: str, group: str) -> GroupView:
        """Members, each partition's owner, committed offset and lag, and the settings."""
        async with self._db.connection() as conn:
            state = await groups.describe(conn, caller.environment_id, topic, group)
            state["extras"] = await fairness.describe(conn, state["group"]["id"])
        return group_view(state)

    async def configure(
        self, caller: Caller, topic: str, group: str, request: GroupConfigRequest, actor: Actor
    ) -> GroupView:
        """Create the group or change its settings (recorded in the audit log); ``push`` turns
        push on, changes it or turns it off, and the answer that made a signing secret shows it."""
        config = group_config(request)
        secret = None
        async with self._db.connection() as conn:
            state = await groups.configure(conn, caller.environment_id, topic, group, config)
            group_id = state["group"]["id"]
            details: dict[str, object] = asdict(config)
            if request.push is not msgspec.UNSET:
                secret = await self._configure_push(conn, state, group, request.push)
                state = await groups.describe(conn, caller.environment_id, topic, group)
                details["push"] = push_config.view(state["push"])
            if request.fairness is not msgspec.UNSET:
                await fairness.set_fairness(conn, group_id, request.fairness)
            if request.on_failure is not msgspec.UNSET:
                await fairness.set_on_failure(conn, group_id, request.on_failure)
            state["extras"] = await fairness.describe(conn, group_id)
            details.update(state["extras"])
            target = audit_target(caller.environment_id, topic, group)
            await audit.record(
                conn, caller.organisation_id, actor, "group.configured", target, **details
            )
        self._refs.forget(caller.environment_id, topic, group)
        view = group_view(state)
        if secret is not None:
            view.push_secret = secret
        return view

    async def _configure_push(
        self, conn: Conn, state: dict[str, Any], group: str, push: PushConfigRequest | None
    ) -> str | None:
        """Push on, changed or off for the group just configured; a new secret, if one was made."""
        group_id = state["group"]["id"]
        return await push_config.apply(
            conn, group_id, group, push, self._sealer, self._allow_private
        )

    async def delete(self, caller: Caller, topic: str, group: str) -> None:
        """Remove the group with its members and committed offsets."""
        async with self._db.connection() as conn:
            await groups.delete(conn, caller.environment_id, topic, group)
        self._refs.forget(caller.environment_id, topic, group)

    async def join(
        self, caller: Caller, topic: str, group: str, request: JoinRequest
    ) -> JoinResponse:
        """A new member (or a rejoin), its generation and partitions; the group is created
        with its defaults if it does not exist."""
        timeout_ms = (
            None
            if request.session_timeout is None
            else groups.parse_duration_ms(
                request.session_timeout, "sessionTimeout", groups.SESSION_TIMEOUT_MS
            )
        )
        async with self._db.connection() as conn:
            joined = await groups.join(
                conn,
                caller.environment_id,
                topic,
                group,
                request.member_id,
                request.client_id,
                timeout_ms,
                request.max_in_flight,
            )
        return JoinResponse(
            joined.member_id,
            joined.generation,
            joined.assignments,
            joined.heartbeat_interval_ms,
            joined.session_timeout_ms,
            joined.max_in_flight,
            joined.ack_timeout_ms,
            joined.delivery,
        )

    async def heartbeat(
        self, caller: Caller, topic: str, group: str, member_id: str, window: int | None = None
    ) -> HeartbeatResponse:
        """Keep a member alive; ``shouldRejoin`` when the generation moved on. ``window``, when
        given, becomes the member's own window (as on a join)."""
        async with self._db.connection() as conn:
            beat = await groups.heartbeat(
                conn, caller.environment_id, topic, group, member_id, window
            )
        return HeartbeatResponse(beat.generation, beat.should_rejoin, beat.ack_timeout_ms)

    async def leave(self, caller: Caller, topic: str, group: str, member_id: str) -> None:
        """The member leaves at once; its partitions go to the others."""
        async with self._db.connection() as conn:
            await groups.leave(conn, caller.environment_id, topic, group, member_id)

    async def offsets(
        self, caller: Caller, topic: str, group: str, partition: int | None
    ) -> list[dict[str, int]]:
        """``{partition, current, latest, lag}`` of one partition, or of each."""
        async with in_group(self._db, caller, topic, group) as (conn, ref):
            return await delivery.offsets(conn, ref, partition)

    async def seek(
        self, caller: Caller, topic: str, group: str, partition: int, offset: int
    ) -> dict[str, int]:
        """Deliver a partition from ``offset`` on; the messages in flight on it are forgotten."""
        async with in_group(self._db, caller, topic, group) as (conn, ref):
            return await delivery.seek(conn, ref, partition, offset)

    async def reset(
        self, caller: Caller, topic: str, group: str, to: str | int
    ) -> list[dict[str, int]]:
        """Every partition to ``earliest``, ``latest`` or an offset; refused while members are
        joined (409 ``GROUP_HAS_ACTIVE_MEMBERS``)."""
        async with in_group(self._db, caller, topic, group) as (conn, ref):
            return await delivery.reset(conn, caller.environment_id, ref, to)

    async def lag(
        self,
        caller: Caller,
        topic: str,
        group: str,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> LagSeries:
        """The group's lag, rates and time to drain per minute of ``[since, until)``."""
        async with self._db.connection() as conn:
            return await lag.lag_series(conn, caller.environment_id, topic, group, since, until)

    async def detail(self, caller: Caller, topic: str, group: str) -> GroupDetail:
        """The group as :meth:`describe` shows it (its rows), with its lag over the last hour."""
        async with self._db.connection() as conn:
            return await overview.group_detail(conn, caller.environment_id, topic, group)
