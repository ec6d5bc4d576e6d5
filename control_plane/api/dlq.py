"""``/v1/topics/{topic}/groups/{group}/dlq``: a group's dead-letter queue, inspect and replay."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, QueryParameter

from control_plane.api.consume import group_session
from data_plane.deadletters import service as dlq
from data_plane.runtime import DataPlane


class DeadLetterController(Controller):
    """Inspect needs the ``consume`` scope; replaying, an operator's act, ``admin``."""

    path = "/topics/{topic:str}/groups/{group:str}/dlq"
    tags = ["dead-letter queues"]
    opt = {"scope": "consume"}

    @get("/", summary="Inspect the dead-letter queue, oldest first")
    async def inspect(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
        limit: Annotated[int, QueryParameter(ge=1, le=dlq.MAX_PAGE)] = 100,
        after: Annotated[
            str | None, QueryParameter(description="messageId to continue after")
        ] = None,
    ) -> dlq.DeadLetterPage:
        """Original data, error reason, attempts and timestamps; ``depth`` counts the queue."""
        async with group_session(request, data_plane, topic, group) as (conn, ref):
            return await dlq.inspect(conn, ref, limit, after)

    @post(
        "/{message_id:str}/replay",
        summary="Replay one message to the group",
        status_code=200,
        opt={"scope": "admin"},
    )
    async def replay_one(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
        message_id: FromPath[str],
    ) -> dlq.Replayed:
        """404 if it is not in the queue; 409 ``DLQ_MESSAGE_REPLAYED`` if replayed already."""
        async with group_session(request, data_plane, topic, group) as (conn, ref):
            return await dlq.replay_one(conn, ref, message_id)

    @post(
        "/replay",
        summary="Replay every message of the queue",
        status_code=200,
        opt={"scope": "admin"},
    )
    async def replay_all(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
    ) -> dlq.Replayed:
        """Each comes back as attempt 1, at its original partition and offset."""
        async with group_session(request, data_plane, topic, group) as (conn, ref):
            return await dlq.replay_all(conn, ref)
