"""Consuming in a group: pull (long-poll), push (SSE), ack, nack, extend, offsets."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import msgspec
from litestar import Controller, Litestar, Request, Response, get, post
from litestar.params import Body, FromPath, QueryParameter
from litestar.response import ServerSentEvent
from litestar.response.sse import ServerSentEventMessage

from control_plane.auth import auth_context
from control_plane.messages import segment_reader
from control_plane.resources import resources_of
from data_plane import delivery
from data_plane.delivery import AckRejected, Delivery, GroupRef
from data_plane.groups import parse_duration_ms
from data_plane.notify import PublishListener
from data_plane.publish import message_id
from data_plane.read_schemas import iso_timestamp
from infra import settings
from infra.errors import QueueCoreError
from observability.logging import get_logger

KEEPALIVE_S = 15.0
log = get_logger("queuecore.consume")
STREAM_BATCH = 100


class PullRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``POST …/members/{memberId}/pull``."""

    max_messages: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 10
    wait_ms: Annotated[int, msgspec.Meta(ge=0, le=30_000)] = 0


class AckRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``POST …/ack``: settle leases as done."""

    ack_ids: Annotated[list[str], msgspec.Meta(min_length=1, max_length=10_000)]


class NackRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``POST …/nack``: the message failed; retry later or dead-letter."""

    ack_id: str
    error: Annotated[str, msgspec.Meta(max_length=4096)] = ""
    retry_delay: str | int | None = None


class ExtendRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``POST …/extend``: more time for long work."""

    ack_ids: Annotated[list[str], msgspec.Meta(min_length=1, max_length=10_000)]
    seconds: int


class SeekRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``POST …/offsets/seek``."""

    partition: Annotated[int, msgspec.Meta(ge=0)]
    offset: Annotated[int, msgspec.Meta(ge=0)]


class ResetRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``POST …/offsets/reset``."""

    to: Literal["earliest", "latest"] | Annotated[int, msgspec.Meta(ge=0)]


class DeliveredMessage(msgspec.Struct, rename="camel"):
    """A message leased to a member."""

    id: str
    topic: str
    partition: int
    offset: int
    data: msgspec.Raw
    key: str | None
    headers: dict[str, str]
    timestamp: str
    attempt: int
    ack_id: str


class PullResponse(msgspec.Struct, rename="camel"):
    """Messages leased by a pull (possibly none)."""

    messages: list[DeliveredMessage]


def render(ref: GroupRef, item: Delivery) -> DeliveredMessage:
    """The wire shape of a delivery."""
    message = item.message
    return DeliveredMessage(
        id=message_id(ref.topic_id, item.partition, item.offset),
        topic=ref.topic,
        partition=item.partition,
        offset=item.offset,
        data=msgspec.Raw(message.value),
        key=None if message.key is None else message.key.decode(errors="replace"),
        headers=message.headers,
        timestamp=iso_timestamp(message.timestamp_ms),
        attempt=item.attempt,
        ack_id=item.ack_id,
    )


def listener_of(app: Litestar) -> PublishListener:
    """The process's notification listener."""
    listener: PublishListener = app.state.publish_listener
    return listener


@asynccontextmanager
async def publish_listener(app: Litestar) -> AsyncIterator[None]:
    """Lifespan: one LISTEN connection per process for every waiting consumer."""
    listener = PublishListener(settings.database().url)
    listener.start()
    app.state.publish_listener = listener
    segment_reader(app)  # created now so the local writer fills its cache from the first flush
    try:
        yield
    finally:
        await listener.stop()


@asynccontextmanager
async def group_session(
    request: Request[Any, Any, Any], topic: str, group: str
) -> AsyncIterator[tuple[delivery.Conn, GroupRef]]:
    """One transaction on the caller's group: committed when the block ends without error."""
    async with resources_of(request.app).db.connection() as conn:
        yield (
            conn,
            await delivery.group_ref(conn, auth_context(request).environment_id, topic, group),
        )


async def _pull_once(
    request: Request[Any, Any, Any], topic: str, group: str, member_id: str, limit: int
) -> tuple[GroupRef, list[Delivery]]:
    async with group_session(request, topic, group) as (conn, ref):
        return ref, await delivery.pull(conn, segment_reader(request.app), ref, member_id, limit)


async def _wait_for_work(
    request: Request[Any, Any, Any], ref: GroupRef, member_id: str, budget_s: float
) -> None:
    """Sleep until a publish notification, a due lease or retry, or ``budget_s``."""
    async with resources_of(request.app).db.connection() as conn:
        wakeup = await delivery.next_wakeup(conn, ref, member_id)
    timeout = budget_s
    if wakeup is not None:
        timeout = min(timeout, max((wakeup - datetime.now(UTC)).total_seconds(), 0) + 0.01)
    await listener_of(request.app).wait(ref.topic_id, timeout)


class ConsumeController(Controller):
    """Deliver, settle and position a group's messages."""

    path = "/topics/{topic:str}/groups/{group:str}"
    tags = ["consuming"]
    opt = {"scope": "consume"}

    @post("/members/{member_id:str}/pull", summary="Long-poll for messages", status_code=200)
    async def pull(
        self,
        request: Request[Any, Any, Any],
        topic: FromPath[str],
        group: FromPath[str],
        member_id: FromPath[str],
        data: Annotated[PullRequest, Body()],
    ) -> PullResponse:
        """Waits up to ``waitMs`` for at least one message."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + data.wait_ms / 1000
        while True:
            ref, items = await _pull_once(request, topic, group, member_id, data.max_messages)
            remaining = deadline - loop.time()
            if items or remaining <= 0:
                return PullResponse([render(ref, item) for item in items])
            await _wait_for_work(request, ref, member_id, remaining)

    @get("/members/{member_id:str}/stream", summary="Push: messages as Server-Sent Events")
    async def stream(
        self,
        request: Request[Any, Any, Any],
        topic: FromPath[str],
        group: FromPath[str],
        member_id: FromPath[str],
    ) -> ServerSentEvent:
        """Event ``message`` per delivery; a comment keeps idle connections open."""
        ref, first = await _pull_once(request, topic, group, member_id, STREAM_BATCH)
        return ServerSentEvent(_events(request, ref, member_id, first))

    @post("/ack", summary="Acknowledge messages (batched)", status_code=200)
    async def ack(
        self,
        request: Request[Any, Any, Any],
        topic: FromPath[str],
        group: FromPath[str],
        data: Annotated[AckRequest, Body()],
    ) -> Response[dict[str, Any]]:
        """200 with per-id results; 409 ``ACK_REJECTED`` when no id could be acked."""
        async with group_session(request, topic, group) as (conn, ref):
            outcome = await delivery.ack(conn, ref, data.ack_ids)
        if not outcome.done:
            raise AckRejected(outcome.rejected[0]["reason"], rejected=outcome.rejected)
        return Response({"acked": outcome.done, "rejected": outcome.rejected}, status_code=200)

    @post("/nack", summary="Reject a message: retry with backoff or dead-letter", status_code=200)
    async def nack(
        self,
        request: Request[Any, Any, Any],
        topic: FromPath[str],
        group: FromPath[str],
        data: Annotated[NackRequest, Body()],
    ) -> dict[str, Any]:
        """The retry waits ``retryDelay · 2^(attempt-1)``."""
        delay = (
            None if data.retry_delay is None else parse_duration_ms(data.retry_delay, "retryDelay")
        )
        async with group_session(request, topic, group) as (conn, ref):
            return await delivery.nack(
                conn, segment_reader(request.app), ref, data.ack_id, data.error, delay
            )

    @post("/extend", summary="Extend leases", status_code=200)
    async def extend(
        self,
        request: Request[Any, Any, Any],
        topic: FromPath[str],
        group: FromPath[str],
        data: Annotated[ExtendRequest, Body()],
    ) -> dict[str, Any]:
        """Only current, unexpired leases are extended; the others are listed as not extended."""
        async with group_session(request, topic, group) as (conn, ref):
            extended = await delivery.extend(conn, ref, data.ack_ids, data.seconds)
        return {"extended": extended, "notExtended": sorted(set(data.ack_ids) - set(extended))}

    @get("/offsets", summary="Committed offset, end and lag")
    async def offsets(
        self,
        request: Request[Any, Any, Any],
        topic: FromPath[str],
        group: FromPath[str],
        partition: Annotated[int | None, QueryParameter(ge=0)] = None,
    ) -> dict[str, Any]:
        """``{current, latest, lag}`` for one partition, or ``{partitions: […]}``."""
        async with group_session(request, topic, group) as (conn, ref):
            rows = await delivery.offsets(conn, ref, partition)
        if partition is not None:
            return {k: v for k, v in rows[0].items() if k != "partition"}
        return {"partitions": rows}

    @post(
        "/offsets/seek",
        summary="Deliver a partition from an offset",
        status_code=200,
        opt={"scope": "admin"},
    )
    async def seek(
        self,
        request: Request[Any, Any, Any],
        topic: FromPath[str],
        group: FromPath[str],
        data: Annotated[SeekRequest, Body()],
    ) -> dict[str, Any]:
        """Messages in flight on that partition are forgotten."""
        async with group_session(request, topic, group) as (conn, ref):
            return await delivery.seek(conn, ref, data.partition, data.offset)

    @post(
        "/offsets/reset",
        summary="Reset every partition (group must have no members)",
        status_code=200,
        opt={"scope": "admin"},
    )
    async def reset(
        self,
        request: Request[Any, Any, Any],
        topic: FromPath[str],
        group: FromPath[str],
        data: Annotated[ResetRequest, Body()],
    ) -> dict[str, Any]:
        """409 ``GROUP_HAS_ACTIVE_MEMBERS`` while consumers are joined."""
        async with group_session(request, topic, group) as (conn, ref):
            env = auth_context(request).environment_id
            return {"partitions": await delivery.reset(conn, env, ref, data.to)}


async def _events(
    request: Request[Any, Any, Any], ref: GroupRef, member_id: str, first: list[Delivery]
) -> AsyncIterator[ServerSentEventMessage]:
    """Deliveries as they become available; ends with an ``error`` event if the member is gone."""
    items = first
    while True:
        for item in items:
            yield ServerSentEventMessage(
                data=msgspec.json.encode(render(ref, item)).decode(),
                event="message",
                id=item.ack_id,
            )
        try:
            if not items:
                await _wait_for_work(request, ref, member_id, KEEPALIVE_S)
            _, items = await _pull_once(request, ref.topic, ref.name, member_id, STREAM_BATCH)
        except QueueCoreError as exc:
            yield _error_event(exc.code, exc.message)
            return
        except Exception as exc:
            # The stream's response has started: a failure can only end it, with a reason.
            log.warning("stream_failed", member_id=member_id, error=type(exc).__name__)
            yield _error_event("SERVICE_UNAVAILABLE", "The stream failed; reconnect to continue.")
            return
        if not items:
            yield ServerSentEventMessage(comment="keepalive", data=None)


def _error_event(code: str, message: str) -> ServerSentEventMessage:
    """The last event of a stream that cannot go on."""
    return ServerSentEventMessage(
        data=msgspec.json.encode({"code": code, "message": message}).decode(), event="error"
    )
