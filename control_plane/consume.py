"""Consuming in a group: pull (long-poll), push (SSE), ack, nack, extend, offsets."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import msgspec
from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.params import Body, FromPath, QueryParameter

from control_plane.auth import auth_context
from control_plane.groups import LEASE_BUDGET
from control_plane.sse import EventStream, comment, event, events, retry_field
from core.errors import QueueCoreError, ValidationFailed
from core.wire_types import INTEGER_MAX, Int64, NonNegative64, Partition, Text
from data_plane import delivery
from data_plane.delivery import AckRejected, Delivery, GroupRef, Pulled
from data_plane.groups.schemas import Window
from data_plane.groups.service import (
    HEARTBEAT_DIVISOR,
    RETRY_DELAY_MS,
    MemberNotFound,
    member_window,
    parse_duration_ms,
)
from data_plane.read.schemas import iso_timestamp
from data_plane.runtime import DataPlane
from data_plane.write.publish import message_id
from observability.logging import get_logger

KEEPALIVE_S = 15.0
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
    retry_delay: Text | Int64 | None = None


class NackRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``POST …/nack``: the message failed; retry later or dead-letter.

    Either one message (``ackId``, ``error``, ``retryDelay``) or up to 1,000 (``nacks``)."""

    ack_id: Text | None = None
    error: Annotated[Text, msgspec.Meta(max_length=4096)] = ""
    retry_delay: Text | Int64 | None = None
    nacks: Annotated[list[NackItem], msgspec.Meta(min_length=1, max_length=1000)] | None = None


class ExtendRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``POST …/extend``: more time for long work."""

    ack_ids: Annotated[list[Text], msgspec.Meta(min_length=1, max_length=10_000)]
    seconds: Int64


class SeekRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``POST …/offsets/seek``."""

    partition: Partition
    offset: NonNegative64


class ResetRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``POST …/offsets/reset``."""

    to: Literal["earliest", "latest"] | NonNegative64


class DeliveredMessage(msgspec.Struct, rename="camel"):
    """A message leased to a member."""

    message_id: str
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
                attempt,
                ack_id,
            )
            for partition, offset, attempt, ack_id, message in items
        ]


def render(ref: GroupRef, item: Delivery) -> DeliveredMessage:
    """The wire shape of one delivery."""
    return Renderer(ref)(item)


@asynccontextmanager
async def group_session(
    request: Request[Any, Any, Any], data_plane: DataPlane, topic: str, group: str
) -> AsyncIterator[tuple[delivery.Conn, GroupRef]]:
    """One transaction on the caller's group: committed when the block ends without error."""
    async with data_plane.db.connection() as conn:
        yield (
            conn,
            await delivery.group_ref(conn, auth_context(request).environment_id, topic, group),
        )


def _wait_s(pulled: Pulled, budget_s: float) -> float:
    """Until the next lease expiry or due retry of the member's partitions, within the budget.

    And within a heartbeat interval of the member's session: each pull counts as a heartbeat,
    so a consumer waiting on an open stream or long-poll is never evicted as silent.
    """
    budget_s = min(budget_s, pulled.session_timeout_ms / 1000 / HEARTBEAT_DIVISOR)
    if pulled.wakeup is None:
        return budget_s
    return min(budget_s, max((pulled.wakeup - datetime.now(UTC)).total_seconds(), 0) + 0.01)


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
        loop = asyncio.get_running_loop()
        deadline = loop.time() + data.wait_ms / 1000
        ref = await data_plane.group_ref(auth_context(request).environment_id, topic, group)
        if data.max_in_flight is not None:
            ref = await _set_window(request, data_plane, ref, member_id, data.max_in_flight)
        # Registered before each pull, so a publish while it runs is not missed.
        pulled: Pulled | None = None
        with data_plane.listener.watch(ref.topic_id) as watch:
            while True:
                watch.event.clear()
                pulled = await data_plane.pull(
                    auth_context(request).environment_id, ref, member_id, data.max_messages, pulled
                )
                ref, watch.partitions, watch.full = pulled.ref, pulled.partitions, pulled.full
                remaining = deadline - loop.time()
                if pulled.deliveries or remaining <= 0 or data_plane.stopping.is_set():
                    return PullResponse(Renderer(ref).all(pulled.deliveries))
                await watch.wait(_wait_s(pulled, remaining))  # the server stopping wakes it too

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
        ref = await data_plane.group_ref(auth_context(request).environment_id, topic, group)
        env = auth_context(request).environment_id
        if max_in_flight is not None:
            ref = await _set_window(request, data_plane, ref, member_id, max_in_flight)
        first = await data_plane.pull(env, ref, member_id, STREAM_BATCH)
        return EventStream(_events(data_plane, env, member_id, first))

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
        ref = await data_plane.group_ref(auth_context(request).environment_id, topic, group)
        async with data_plane.db.connection() as conn:
            outcome = await delivery.ack(conn, ref, data.ack_ids)
            if not outcome.done:
                fresh = await data_plane.fresh_ref(conn, auth_context(request).environment_id, ref)
                if fresh.id != ref.id:
                    outcome = await delivery.ack(conn, fresh, data.ack_ids)
        if not outcome.done:
            verdicts = {"acked": [], "rejected": outcome.rejected}  # beside "error", as in a 200
            raise AckRejected(outcome.rejected[0]["reason"], body=verdicts)
        data_plane.listener.poke_full(ref.topic_id)  # a stream waiting for room pulls again
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
        items = _nack_items(data)
        async with group_session(request, data_plane, topic, group) as (conn, ref):
            if data.nacks is None:
                nacked = await delivery.nack(conn, data_plane.reader, ref, *items[0])
            else:
                done, rejected = await delivery.nack_many(conn, data_plane.reader, ref, items)
        # Its streams pull again: room was made, and the retry's due time is a new wake-up.
        data_plane.listener.poke({ref.topic_id})
        if data.nacks is None:
            return Response(nacked, status_code=200)
        if not done:
            body = {"nacked": [], "rejected": rejected}  # beside "error", as for acks
            raise AckRejected(rejected[0]["reason"], body=body)
        return Response({"nacked": done, "rejected": rejected}, status_code=200)

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
        async with group_session(request, data_plane, topic, group) as (conn, ref):
            extended = await delivery.extend(conn, ref, data.ack_ids, data.seconds)
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
        async with group_session(request, data_plane, topic, group) as (conn, ref):
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
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
        data: Annotated[SeekRequest, Body()],
    ) -> dict[str, Any]:
        """Messages in flight on that partition are forgotten."""
        async with group_session(request, data_plane, topic, group) as (conn, ref):
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
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
        data: Annotated[ResetRequest, Body()],
    ) -> dict[str, Any]:
        """409 ``GROUP_HAS_ACTIVE_MEMBERS`` while consumers are joined."""
        async with group_session(request, data_plane, topic, group) as (conn, ref):
            env = auth_context(request).environment_id
            return {"partitions": await delivery.reset(conn, env, ref, data.to)}


async def _events(
    data_plane: DataPlane, environment_id: str, member_id: str, first: Pulled
) -> AsyncIterator[bytes]:
    """Deliveries as they become available; ends with an ``error`` event if the member is gone,
    or when the server stops (after sending what it pulled; the client reconnects elsewhere).

    The stream registers for its partitions' notifications before each pull and sleeps on
    that registration only when a pull came back short, so a publish is delivered as soon as
    its NOTIFY arrives: no polling, no lost wake-up. The server stopping wakes it too.
    """
    yield retry_field(RECONNECT_MS)
    pulled, look_again = first, True  # registered after the first pull: look once more
    stopping = data_plane.stopping
    with data_plane.listener.watch(first.ref.topic_id, first.partitions) as watch:
        watch.full = first.full
        while True:
            if pulled.deliveries:
                wires = Renderer(pulled.ref).all(pulled.deliveries)
                yield events("message", [(wire.ack_id, wire) for wire in wires])
            if stopping.is_set():
                break
            try:
                if not look_again and len(pulled.deliveries) < STREAM_BATCH:
                    await watch.wait(_wait_s(pulled, KEEPALIVE_S))
                    if stopping.is_set():
                        break
                look_again = False
                watch.event.clear()
                pulled = await data_plane.pull(
                    environment_id, pulled.ref, member_id, STREAM_BATCH, pulled
                )
                watch.partitions, watch.full = pulled.partitions, pulled.full
            except QueueCoreError as exc:
                yield _error_event(exc.code, exc.message)
                return
            except Exception as exc:
                # The stream's response has started: a failure can only end it, with a reason.
                log.warning("stream_failed", member_id=member_id, error=type(exc).__name__)
                yield _error_event(
                    "SERVICE_UNAVAILABLE", "The stream failed; reconnect to continue."
                )
                return
            if not pulled.deliveries:
                yield comment("keepalive")
    yield _error_event("SERVICE_UNAVAILABLE", "server shutting down, reconnect")


def _nack_items(data: NackRequest) -> list[tuple[str, str, int | None]]:
    """``(ackId, error, retry delay ms)`` of each message of a nack request."""
    if (data.ack_id is None) == (data.nacks is None):
        raise ValidationFailed("give either ackId or nacks", field="ackId")
    if data.nacks is None:
        assert data.ack_id is not None
        return [(data.ack_id, data.error, _delay_ms(data.retry_delay, "retryDelay"))]
    return [
        (n.ack_id, n.error, _delay_ms(n.retry_delay, f"nacks[{i}].retryDelay"))
        for i, n in enumerate(data.nacks)
    ]


def _delay_ms(value: str | int | None, field: str) -> int | None:
    return None if value is None else parse_duration_ms(value, field, RETRY_DELAY_MS)


async def _set_window(
    request: Request[Any, Any, Any],
    data_plane: DataPlane,
    ref: GroupRef,
    member_id: str,
    window: int,
) -> GroupRef:
    """Set the member's window before its pull or stream; the group looked up again if needed."""
    env = auth_context(request).environment_id
    async with data_plane.db.connection() as conn:
        try:
            await member_window(conn, ref.id, member_id, window)
        except MemberNotFound:
            fresh = await data_plane.fresh_ref(conn, env, ref)
            if fresh.id == ref.id:
                raise
            await member_window(conn, fresh.id, member_id, window)
            return fresh
    return ref


def _error_event(code: str, message: str) -> bytes:
    """The last event of a stream that cannot go on."""
    return event("error", {"code": code, "message": message})
