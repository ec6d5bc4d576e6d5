"""Consuming in a group: pull (long-poll), push (SSE), ack, nack, extend, offsets."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Annotated, Any, ClassVar, Literal

import msgspec
from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.params import Body, FromPath, QueryParameter

from control_plane.api.groups import LEASE_BUDGET
from control_plane.api.sse import EventStream, comment, event, events, retry_field
from control_plane.edge.auth import auth_context
from core.errors import QueueCoreError, ValidationFailed
from core.wire_types import INTEGER_MAX, NonNegative64, Partition, Text
from data_plane.service import (
    ENCODINGS,
    MAX_EXTEND_S,
    DataPlane,
    DeliveredMessage,
    Delivery,
    GroupRef,
    RetryDelay,
    Stream,
    Window,
    iso_timestamp,
    message_id,
    scheduling,
)
from observability.logging import get_logger

RECONNECT_MS = 1000  # the SSE ``retry:`` an EventSource waits before reconnecting
log = get_logger("queuecore.consume")
STREAM_BATCH = 100


class PullRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``POST …/members/{memberId}/pull``."""

    max_messages: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 10
    wait_ms: Annotated[int, msgspec.Meta(ge=0, le=30_000)] = 0
    max_in_flight: Window | None = None  # sets the member's window first


class AckRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``POST …/ack``: settle leases as done."""

    ack_ids: Annotated[list[Text], msgspec.Meta(min_length=1, max_length=10_000)]


class NackItem(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """One failed message of a batched nack."""

    ack_id: Text
    error: Annotated[Text, msgspec.Meta(max_length=4096)] = ""
    retry_delay: RetryDelay | None = None


class NackRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``POST …/nack``: the message failed; retry later or dead-letter.

    Either one message (``ackId``, ``error``, ``retryDelay``) or up to 1,000 (``nacks``)."""

    # The handler's either-or, written into the OpenAPI document (control_plane.edge.openapi_rules).
    schema_rules: ClassVar[dict[str, Any]] = {
        "oneOf": [
            {
                "required": ["ackId"],
                "properties": {"ackId": {"type": "string"}, "nacks": {"type": "null"}},
            },
            {
                "required": ["nacks"],
                "properties": {"nacks": {"type": "array"}, "ackId": {"type": "null"}},
            },
        ]
    }

    ack_id: Text | None = None
    error: Annotated[Text, msgspec.Meta(max_length=4096)] = ""
    retry_delay: RetryDelay | None = None
    nacks: Annotated[list[NackItem], msgspec.Meta(min_length=1, max_length=1000)] | None = None


class ExtendRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``POST …/extend``: more time for long work."""

    ack_ids: Annotated[list[Text], msgspec.Meta(min_length=1, max_length=10_000)]
    seconds: Annotated[int, msgspec.Meta(ge=1, le=MAX_EXTEND_S)]


class SeekRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``POST …/offsets/seek``."""

    partition: Partition
    offset: NonNegative64


class ResetRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``POST …/offsets/reset``."""

    to: Literal["earliest", "latest"] | NonNegative64


class PullResponse(msgspec.Struct, rename="camel"):
    """Messages leased by a pull (possibly none)."""

    messages: list[DeliveredMessage]


_ID_TAIL = 62**2  # the last two characters of a message id encode offset % 3844


@functools.cache
def _id_tails() -> list[str]:
    return [message_id("", 0, low)[-2:] for low in range(_ID_TAIL)]


class Renderer:
    """Wire shapes of a batch of deliveries of one group.

    Most of a batch's messages share a publish timestamp and the head of their message id, so
    each is worked out once per batch rather than once per message.
    """

    def __init__(self, ref: GroupRef) -> None:
        self.ref = ref
        self._stamps: dict[int, str] = {}
        self._id_heads: dict[tuple[int, int], str] = {}
        self._tails = _id_tails()

    def message_id(self, partition: int, offset: int) -> str:
        """``message_id(topic, partition, offset)``, mostly from memory."""
        low = offset % _ID_TAIL
        head = self._id_heads.get((partition, offset - low))
        if head is None:
            head = message_id(self.ref.topic_id, partition, offset - low)[:-2]
            self._id_heads[(partition, offset - low)] = head
        return head + self._tails[low]

    def timestamp(self, timestamp_ms: int) -> str:
        """``iso_timestamp(timestamp_ms)``, mostly from memory."""
        text = self._stamps.get(timestamp_ms)
        if text is None:
            text = self._stamps[timestamp_ms] = iso_timestamp(timestamp_ms)
        return text

    def __call__(self, item: Delivery) -> DeliveredMessage:
        """The wire shape of a delivery."""
        return self.all([item])[0]

    def all(self, items: list[Delivery]) -> list[DeliveredMessage]:
        """The wire shapes of a batch (one loop, positional fields: it runs per message)."""
        topic, message_id, timestamp = self.ref.topic, self.message_id, self.timestamp
        return [
            DeliveredMessage(
                message_id(partition, offset),
                topic,
                partition,
                offset,
                msgspec.Raw(message.value),
                None if message.key is None else message.key.decode(errors="replace"),
                message.headers,
                timestamp(message.timestamp_ms),
                ENCODINGS[message.encoding],
                attempt=attempt,
                ack_id=ack_id,
                **(scheduling(message.schedule) if message.schedule is not None else {}),
            )
            for partition, offset, attempt, ack_id, message in items
        ]


def render(ref: GroupRef, item: Delivery) -> DeliveredMessage:
    """The wire shape of one delivery."""
    return Renderer(ref)(item)


class ConsumeController(Controller):
    """Deliver, settle and position a group's messages."""

    path = "/topics/{topic:str}/groups/{group:str}"
    tags = ["consuming"]
    opt = {"scope": "consume"}

    @post("/members/{member_id:str}/pull", summary="Long-poll for messages", status_code=200)
    async def pull(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
        member_id: FromPath[str],
        data: Annotated[PullRequest, Body()],
    ) -> PullResponse:
        """Waits up to ``waitMs`` for at least one message (less when the server stops)."""
        pulled = await data_plane.pull(
            auth_context(request),
            topic,
            group,
            member_id,
            data.max_messages,
            data.wait_ms,
            data.max_in_flight,
        )
        return PullResponse(Renderer(pulled.ref).all(pulled.deliveries))

    @get("/members/{member_id:str}/stream", summary="Push: messages as Server-Sent Events")
    async def stream(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
        member_id: FromPath[str],
        max_in_flight: Annotated[
            int | None,
            QueryParameter(
                name="maxInFlight",
                ge=1,
                le=100_000,
                description="Sets the member's window first (see the join's maxInFlight).",
            ),
        ] = None,
    ) -> EventStream:
        """Event ``message`` per delivery; a comment keeps idle connections open.

        The stream never holds more messages leased to its member than the member's window."""
        stream = await data_plane.stream(
            auth_context(request), topic, group, member_id, STREAM_BATCH, max_in_flight
        )
        return EventStream(_events(stream, member_id))

    @post("/ack", summary="Acknowledge messages (batched)", status_code=200)
    async def ack(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
        data: Annotated[AckRequest, Body()],
    ) -> Response[dict[str, Any]]:
        """200 with per-id results; 409 ``ACK_REJECTED`` when no id could be acked."""
        outcome = await data_plane.ack(auth_context(request), topic, group, data.ack_ids)
        return Response({"acked": outcome.done, "rejected": outcome.rejected}, status_code=200)

    @post(
        "/nack",
        summary="Reject messages: retry with backoff or dead-letter",
        description=(
            "One message (`ackId`, `error`, `retryDelay`: answered `{ackId, deadLettered, "
            "retryInMs}`, 409 `ACK_REJECTED` when its lease ended) or up to 1,000 (`nacks`: "
            "answered `{nacked: [...], rejected: [{ackId, reason}]}`, 409 `ACK_REJECTED` with "
            "the same fields when none could be nacked). Either way one request of the consume "
            "budget."
        ),
        status_code=200,
    )
    async def nack(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
        data: Annotated[NackRequest, Body()],
    ) -> Response[dict[str, Any]]:
        """The retry waits ``retryDelay · 2^(attempt-1)``."""
        ctx = auth_context(request)
        if (data.ack_id is None) == (data.nacks is None):
            raise ValidationFailed("give either ackId or nacks", field="ackId")
        if data.ack_id is not None:
            nacked = await data_plane.nack(
                ctx, topic, group, data.ack_id, data.error, data.retry_delay
            )
            return Response(nacked, status_code=200)
        assert data.nacks is not None
        items = [(n.ack_id, n.error, n.retry_delay) for n in data.nacks]
        outcome = await data_plane.nack_many(ctx, topic, group, items)
        return Response({"nacked": outcome.done, "rejected": outcome.rejected}, status_code=200)

    @post(
        "/extend",
        summary="Extend leases",
        description=LEASE_BUDGET,
        status_code=200,
        opt={"rate": "lease"},
    )
    async def extend(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
        data: Annotated[ExtendRequest, Body()],
    ) -> dict[str, Any]:
        """Only current, unexpired leases are extended; the others are listed as not extended."""
        extended = await data_plane.extend(
            auth_context(request), topic, group, data.ack_ids, data.seconds
        )
        return {"extended": extended, "notExtended": sorted(set(data.ack_ids) - set(extended))}

    @get("/offsets", summary="Committed offset, end and lag")
    async def offsets(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
        partition: Annotated[int | None, QueryParameter(ge=0, le=INTEGER_MAX)] = None,
    ) -> dict[str, Any]:
        """``{current, latest, lag}`` for one partition, or ``{partitions: […]}``."""
        rows = await data_plane.groups.offsets(auth_context(request), topic, group, partition)
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
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
        data: Annotated[SeekRequest, Body()],
    ) -> dict[str, Any]:
        """Messages in flight on that partition are forgotten."""
        return await data_plane.groups.seek(
            auth_context(request), topic, group, data.partition, data.offset
        )

    @post(
        "/offsets/reset",
        summary="Reset every partition (group must have no members)",
        status_code=200,
        opt={"scope": "admin"},
    )
    async def reset(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
        data: Annotated[ResetRequest, Body()],
    ) -> dict[str, Any]:
        """409 ``GROUP_HAS_ACTIVE_MEMBERS`` while consumers are joined."""
        partitions = await data_plane.groups.reset(auth_context(request), topic, group, data.to)
        return {"partitions": partitions}


async def _events(stream: Stream, member_id: str) -> AsyncIterator[bytes]:
    """The stream's deliveries as ``message`` events, a comment when a pull found nothing; ends
    with an ``error`` event when the member is gone or the stream fails, when a newer stream of
    the member took over, or when the server stops (after sending what it pulled: the client
    reconnects elsewhere)."""
    yield retry_field(RECONNECT_MS)
    try:
        async with aclosing(stream.batches()) as batches:
            async for pulled in batches:
                if pulled.deliveries:
                    wires = Renderer(pulled.ref).all(pulled.deliveries)
                    yield events("message", [(wire.ack_id, wire) for wire in wires])
                elif pulled is not stream.first:
                    yield comment("keepalive")
    except QueueCoreError as exc:
        yield _error_event(exc.code, exc.message)
        return
    except Exception as exc:
        # The stream's response has started: a failure can only end it, with a reason.
        log.warning("stream_failed", member_id=member_id, error=type(exc).__name__)
        yield _error_event("SERVICE_UNAVAILABLE", "The stream failed; reconnect to continue.")
        return
    if stream.replaced:
        message = "A newer stream of this member took over; reconnect to continue."
        yield _error_event("SERVICE_UNAVAILABLE", message)
        return
    yield _error_event("SERVICE_UNAVAILABLE", "server shutting down, reconnect")


def _error_event(code: str, message: str) -> bytes:
    """The last event of a stream that cannot go on."""
    return event("error", {"code": code, "message": message})
