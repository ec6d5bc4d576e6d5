"""``/v1/topics/{topic}/groups``: consumer-group configuration and membership."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, delete, get, post, put
from litestar.di import NamedDependency
from litestar.params import Body, FromPath

from control_plane.edge.auth import auth_context
from data_plane.service import (
    DataPlane,
    GroupConfigRequest,
    GroupStats,
    GroupSummary,
    GroupView,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinRequest,
    JoinResponse,
)
from tenants.team.audit import Actor

# How heartbeats and extends are counted (docs/consumer-groups.md, "A consumer's budget").
LEASE_BUDGET = (
    "Counts against the key's lease budget (as many requests per second as its consume "
    "budget, counted apart), not against the consume budget meant for pulls, acks and nacks."
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
        return await data_plane.groups.list_all(auth_context(request), topic)

    @get("/{group:str}", summary="Describe a consumer group")
    async def describe(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
    ) -> GroupView:
        """Owners, committed offsets and lag per partition."""
        return await data_plane.groups.describe(auth_context(request), topic, group)

    @get("/{group:str}/stats", summary="A group's stats, per fairness key and throttle key")
    async def stats(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
    ) -> GroupStats:
        """Depth, in flight and consumers; a fair group's keys (pending in its look-ahead
        windows, deficit, weight); the environment's throttle keys; hook failures."""
        return await data_plane.group_stats(auth_context(request), topic, group)

    @put("/{group:str}", summary="Create or configure a consumer group", opt={"scope": "admin"})
    async def configure(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
        data: Annotated[GroupConfigRequest, Body()],
    ) -> GroupView:
        """startFrom, ackTimeout, maxInFlight, sessionTimeout, deadLetter; ``fairness`` and
        ``onFailure`` (absent: kept, null: off; 422 ``INVALID_HOOK`` for a hook that does not
        compile)."""
        ctx = auth_context(request)
        return await data_plane.groups.configure(ctx, topic, group, data, Actor.api_key(ctx.key_id))

    @delete("/{group:str}", summary="Delete a consumer group", opt={"scope": "admin"})
    async def delete_group(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
    ) -> None:
        """Removes members and committed offsets."""
        await data_plane.groups.delete(auth_context(request), topic, group)

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
        return await data_plane.groups.join(auth_context(request), topic, group, data)

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
        return await data_plane.groups.heartbeat(
            auth_context(request), topic, group, member_id, window
        )

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
        await data_plane.groups.leave(auth_context(request), topic, group, member_id)
