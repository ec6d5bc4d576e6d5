"""``/v1/topics/{topic}/partitions/{partition}/messages``: browse a partition (consume scope)."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, get
from litestar.di import NamedDependency
from litestar.params import PathParameter, QueryParameter

from control_plane.edge.auth import auth_context
from core.wire_types import BIGINT_MAX, INTEGER_MAX
from data_plane.service import DataPlane, MessagePage, message_id, message_page

MAX_BROWSE_LIMIT = 1000


class MessagesController(Controller):
    """Read stored messages of one partition by offset, without a consumer group."""

    path = "/topics/{topic:str}/partitions/{partition:int}/messages"
    tags = ["messages"]
    opt = {"scope": "consume"}

    @get(
        "/",
        summary="Browse a partition's messages from an offset",
        description=(
            "Returns up to `limit` messages starting at `offset` (default: the earliest retained "
            "offset). `offset == latestOffset` is the end of the partition: an empty page. An "
            "offset before `earliestOffset` or after `latestOffset` is `416 OFFSET_OUT_OF_RANGE`, "
            "whose body names both bounds."
        ),
    )
    async def browse(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: Annotated[str, PathParameter()],
        partition: Annotated[int, PathParameter(ge=0, le=INTEGER_MAX)],
        offset: Annotated[int | None, QueryParameter(ge=0, le=BIGINT_MAX)] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_BROWSE_LIMIT)] = 100,
    ) -> MessagePage:
        """Messages with their offsets, then ``nextOffset`` to continue from."""
        ref, result = await data_plane.browse(
            auth_context(request), topic, partition, offset, limit
        )
        ids = [message_id(ref.id, partition, m.offset) for m in result.messages]
        return message_page(ref.name, partition, result, ids)
