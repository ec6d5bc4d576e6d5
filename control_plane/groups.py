"""``/v1/topics/{topic}/groups``: consumer-group configuration and membership."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, delete, get, post, put
from litestar.di import NamedDependency
from litestar.params import Body, FromPath

from control_plane.auth import auth_context
from data_plane.groups import service as groups
from data_plane.groups.schemas import (
    GroupConfigRequest,
    GroupSummary,
    GroupView,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinRequest,
    JoinResponse,
    MemberView,
    PartitionState,
)
from data_plane.runtime import DataPlane
from tenants.team.audit import Actor

# How heartbeats and extends are counted (docs/consumer-groups.md, "A consumer's budget").
LEASE_BUDGET = (
    "Counts against the key's lease budget (as many requests per second as its consume "
    "budget, counted apart), not against the consume budget meant for pulls, acks and nacks."
)


def group_config(data: GroupConfigRequest) -> groups.GroupConfig:
    """The service's settings from a request (durations checked against their bounds)."""
    dead = data.dead_letter
    return groups.GroupConfig(
        start_from=data.start_from,
        ack_timeout_ms=groups.parse_duration_ms(
            data.ack_timeout, "ackTimeout", groups.ACK_TIMEOUT_MS
        ),
        max_in_flight=data.max_in_flight,
        max_retries=dead.max_retries if dead else 5,
        retry_delay_ms=groups.parse_duration_ms(
            dead.retry_delay, "deadLetter.retryDelay", groups.RETRY_DELAY_MS
        )
        if dead
        else 30_000,
        alert_threshold=dead.alert_threshold if dead else None,
        session_timeout_ms=groups.parse_duration_ms(
            data.session_timeout, "sessionTimeout", groups.SESSION_TIMEOUT_MS
        ),
    )


def group_view(state: dict[str, Any]) -> GroupView:
    """Render :func:`data_plane.groups.service.describe`'s state."""
    group = state["group"]
    partitions = [
        PartitionState(
            id=row["partition"],
            consumer=row["owner_member_id"],
            offset=row["committed_offset"],
            lag=max(row["next_offset"] - row["committed_offset"], 0),
        )
        for row in state["partitions"]
    ]
    members = [
        MemberView(
            id=m["id"],
            client_id=m["client_id"],
            generation_id=m["generation"],
            last_heartbeat_at=m["last_heartbeat_at"].isoformat(),
        )
        for m in state["members"]
    ]
    config = {
        "startFrom": group["start_from"],
        "ackTimeout": groups.format_duration_ms(group["ack_timeout_ms"]),
        "maxInFlight": group["max_in_flight"],
        "sessionTimeout": groups.format_duration_ms(group["session_timeout_ms"]),
        "deadLetter": {
            "maxRetries": group["max_retries"],
            "retryDelay": groups.format_duration_ms(group["retry_delay_ms"]),
            "alertThreshold": group["alert_threshold"],
        },
    }
    return GroupView(
        name=group["name"],
        topic=state["topic"]["name"],
        consumers=len(members),
        generation_id=state["generation"],
        partitions=partitions,
        members=members,
        config=config,
        dead_letters=state["dead_letters"],
    )


class GroupsController(Controller):
    """Configure, list and describe groups; join, heartbeat and leave as a member."""

    path = "/topics/{topic:str}/groups"
    tags = ["consumer groups"]
    opt = {"scope": "consume"}

    @get("/", summary="List the topic's consumer groups")
    async def list_groups(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
    ) -> list[GroupSummary]:
        """``[{name, consumers, lag}]``."""
        async with data_plane.db.connection() as conn:
            rows = await groups.list_groups(conn, auth_context(request).environment_id, topic)
        return [
            GroupSummary(
                name=r["name"],
                consumers=r["consumers"],
                lag=int(r["lag"]),
                dead_letters=r["dead_letters"],
            )
            for r in rows
        ]

    @get("/{group:str}", summary="Describe a consumer group")
    async def describe(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
    ) -> GroupView:
        """Owners, committed offsets and lag per partition."""
        async with data_plane.db.connection() as conn:
            return group_view(
                await groups.describe(conn, auth_context(request).environment_id, topic, group)
            )

    @put("/{group:str}", summary="Create or configure a consumer group", opt={"scope": "admin"})
    async def configure(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
        data: Annotated[GroupConfigRequest, Body()],
    ) -> GroupView:
        """startFrom, ackTimeout, maxInFlight, sessionTimeout, deadLetter."""
        ctx = auth_context(request)
        state = await data_plane.configure_group(
            ctx.organisation_id,
            ctx.environment_id,
            topic,
            group,
            group_config(data),
            Actor.api_key(ctx.key_id),
        )
        return group_view(state)

    @delete("/{group:str}", summary="Delete a consumer group", opt={"scope": "admin"})
    async def delete_group(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
    ) -> None:
        """Removes members and committed offsets."""
        async with data_plane.db.connection() as conn:
            await groups.delete(conn, auth_context(request).environment_id, topic, group)
        data_plane.group_refs.forget(auth_context(request).environment_id, topic, group)

    @post("/{group:str}/members", summary="Join (or rejoin) a consumer group")
    async def join(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
        data: Annotated[JoinRequest, Body()],
    ) -> JoinResponse:
        """Returns the member id, generation and assigned partitions."""
        timeout = (
            groups.parse_duration_ms(
                data.session_timeout, "sessionTimeout", groups.SESSION_TIMEOUT_MS
            )
            if data.session_timeout is not None
            else None
        )
        async with data_plane.db.connection() as conn:
            result = await groups.join(
                conn,
                auth_context(request).environment_id,
                topic,
                group,
                data.member_id,
                data.client_id,
                timeout,
                data.max_in_flight,
            )
        return JoinResponse(
            result.member_id,
            result.generation,
            result.assignments,
            result.heartbeat_interval_ms,
            result.session_timeout_ms,
            result.max_in_flight,
            result.ack_timeout_ms,
            result.delivery,
        )

    @post(
        "/{group:str}/members/{member_id:str}/heartbeat",
        summary="Heartbeat",
        description=LEASE_BUDGET,
        status_code=200,
        opt={"rate": "lease"},
    )
    async def heartbeat(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
        member_id: FromPath[str],
        data: Annotated[HeartbeatRequest | None, Body()] = None,
    ) -> HeartbeatResponse:
        """``shouldRejoin`` when the group's generation moved on; ``maxInFlight`` sets its window."""
        window = None if data is None else data.max_in_flight
        async with data_plane.db.connection() as conn:
            result = await groups.heartbeat(
                conn, auth_context(request).environment_id, topic, group, member_id, window
            )
        return HeartbeatResponse(result.generation, result.should_rejoin, result.ack_timeout_ms)

    @delete("/{group:str}/members/{member_id:str}", summary="Leave a consumer group")
    async def leave(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
        member_id: FromPath[str],
    ) -> None:
        """The member's partitions go to the others at once."""
        async with data_plane.db.connection() as conn:
            await groups.leave(conn, auth_context(request).environment_id, topic, group, member_id)
