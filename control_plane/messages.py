"""``/v1/topics/{topic}/partitions/{partition}/messages``: browse a partition (consume scope)."""

from __future__ import annotations

from typing import Annotated, Any, cast

from litestar import Controller, Litestar, Request, get
from litestar.params import PathParameter, QueryParameter

from control_plane.auth import auth_context
from control_plane.resources import resources_of
from control_plane.usage import meter_delivered
from data_plane import reader as read_path
from data_plane.cache import BlockCache, cache_max_bytes_from_env
from data_plane.publish import message_id
from data_plane.read_schemas import MessagePage, message_page
from data_plane.reader import SegmentReader
from data_plane.wire_types import BIGINT_MAX, INTEGER_MAX

MAX_BROWSE_LIMIT = 1000


def segment_reader(app: Litestar) -> SegmentReader:
    """The process's reader, created on first use; the local writer then fills its cache."""
    reader = app.state.get("segment_reader")
    if reader is None:
        cache = BlockCache(cache_max_bytes_from_env())
        reader = SegmentReader(resources_of(app).objects, cache)
        app.state.segment_reader = reader
        writer = app.state.get("segment_writer")
        if writer is not None:
            writer.subscribe(cache.put_committed)
    return cast(SegmentReader, reader)


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
        topic: Annotated[str, PathParameter()],
        partition: Annotated[int, PathParameter(ge=0, le=INTEGER_MAX)],
        offset: Annotated[int | None, QueryParameter(ge=0, le=BIGINT_MAX)] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_BROWSE_LIMIT)] = 100,
    ) -> MessagePage:
        """Messages with their offsets, then ``nextOffset`` to continue from."""
        ctx = auth_context(request)
        reader = segment_reader(request.app)
        async with resources_of(request.app).db.connection() as conn:
            ref, result = await read_path.browse(
                conn, reader, ctx.environment_id, topic, partition, offset, limit
            )
        ids = [message_id(ref.id, partition, m.offset) for m in result.messages]
        meter_delivered(request, [m.message for m in result.messages])
        return message_page(ref.name, partition, result, ids)
