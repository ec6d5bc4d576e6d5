"""``/v1/topics/{topic}/groups/{group}/dlq``: a group's dead-letter queue, inspect and replay."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, get, post
from litestar.di import NamedDependency
from litestar.params import Body, FromPath, QueryParameter

from control_plane.edge.auth import auth_context
from data_plane.service import (
    MAX_DEAD_LETTER_PAGE,
    DataPlane,
    DeadLetterPage,
    Replayed,
    ReplayRequest,
)


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
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_DEAD_LETTER_PAGE)] = 100,
        after: Annotated[
            str | None, QueryParameter(description="messageId to continue after")
        ] = None,
    ) -> DeadLetterPage:
        """Original data, error reason, attempts and timestamps; ``depth`` counts the queue."""
        return await data_plane.dead_letters.inspect(
            auth_context(request), topic, group, limit, after
        )

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
    ) -> Replayed:
        """404 if it is not in the queue; 409 ``DLQ_MESSAGE_REPLAYED`` if replayed already."""
        return await data_plane.dead_letters.replay_one(
            auth_context(request), topic, group, message_id
        )

    @post(
        "/replay",
        summary="Replay the queue's messages, oldest first: all, or at most `count`",
        status_code=200,
        opt={"scope": "admin"},
    )
    async def replay_all(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
        data: Annotated[ReplayRequest | None, Body()] = None,
    ) -> Replayed:
        """Each comes back as attempt 1, at its original partition and offset."""
        count = None if data is None else data.count
        return await data_plane.dead_letters.replay_all(auth_context(request), topic, group, count)
