"""Consuming in a group: membership, flow control, leases kept, settling in the background.

An :class:`AsyncConsumer` joins its group on first use (configuring the group first when
settings such as ``dead_letter`` were given) with its window: the most messages it holds at
once (``FlowControl.max_messages``, by default 10 per handler). The server leases the member no
more than that, so a slow consumer is never handed a backlog it cannot work through in time.
A background task receives (Server-Sent Events by default; long-poll pulls, asking only for what
fits, when the server offers no stream or with ``stream=False``) into a buffer that handlers or
an ``async for`` take from. While a message is held its lease is extended before it expires
(:mod:`queuecore._flow`); acks, nacks and extensions are batched (:mod:`queuecore._settle`).

A member the server reports gone (``404 MEMBER_NOT_FOUND``: evicted after a pause longer than
its session timeout, or lost with a restarted server) is replaced by a fresh join; messages
received under the old member are dropped, because their leases ended with it and the group
delivers them again. Pulls are not retried blindly: a pull whose answer is lost has still leased
its messages to this member; they come back after the ack timeout as ``attempt + 1``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import socket
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Iterable
from typing import Any, Callable

import httpx

from queuecore._aio import END as _END
from queuecore._aio import STOPPED as _STOPPED
from queuecore._aio import call as _call
from queuecore._aio import next_chunk as _next
from queuecore._aio import wait_for_event as _wait_for_event
from queuecore._flow import Holdings
from queuecore._http import Transport, backoff_s
from queuecore._membership import MembershipMixin
from queuecore._settle import Settler
from queuecore._sse import LineSplitter, SseParser
from queuecore.errors import (
    AckRejected,
    APIConnectionError,
    LeaseExpired,
    QueueCoreError,
    RateLimited,
    ServerError,
    error_from_event,
)
from queuecore.groups import AsyncConsumerGroups, group_path
from queuecore.messages import AsyncMessage, GroupSettings, Membership
from queuecore.models import Duration, FlowControl, duration_seconds

STREAM_READ_TIMEOUT_S = 45.0  # the server writes at least every 15 s on an idle stream
JOIN_TIMEOUT_S = 30.0  # how long stop() waits for the message in hand, then for the tasks
MAX_BATCH_SIZE = 1000  # the API's maxMessages per pull
MAX_WAIT_S = 30.0  # the API's longest long-poll (waitMs)
EVENTS = ("message", "error", "connected", "disconnected", "reconnecting", "rebalanced")
_TRANSIENT = (APIConnectionError, ServerError, RateLimited)
_NO_STREAM = frozenset({405, 406, 501})

Callback = Callable[..., Any]


class _Machinery:
    """The consumer's loop-bound parts, made on first use inside the running loop.

    Python 3.9 binds asyncio primitives to the loop current when they are made, and the
    synchronous client builds consumers outside its loop's thread.
    """

    def __init__(self, consumer: AsyncConsumer, flow: FlowControl, concurrency: int) -> None:
        self.stopping = asyncio.Event()
        self.idle = asyncio.Event()
        self.idle.set()
        self.arrived = asyncio.Event()
        self.lock = asyncio.Lock()
        self.buffer: deque[AsyncMessage] = deque()
        self.settler = Settler(
            consumer._transport, consumer._path, consumer._report, consumer._urgent
        )
        self.holdings = Holdings(
            flow.window(concurrency),
            flow.max_bytes,
            flow.max_lease_extension_s,
            self.settler,
            consumer._report_lost,
            consumer._narrow,
            consumer._report,
        )


class AsyncConsumer(MembershipMixin):
    """A member of a consumer group: iterate it with ``async for``, or set handlers and start it."""

    def __init__(
        self,
        transport: Transport,
        groups: AsyncConsumerGroups,
        topic: str,
        group: str,
        *,
        settings: GroupSettings,
        batch_size: int = 10,
        wait_s: float = 10.0,
        stream: bool = True,
        client_id: str | None = None,
        session_timeout: Duration | None = None,
        logger: logging.Logger,
        flow_control: FlowControl | None = None,
        concurrency: int = 1,
    ) -> None:
        if not 1 <= batch_size <= MAX_BATCH_SIZE:
            raise ValueError(f"batch_size must be between 1 and {MAX_BATCH_SIZE}")
        if not 0 <= wait_s <= MAX_WAIT_S:
            raise ValueError(f"wait must be between 0 and {MAX_WAIT_S} seconds")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.topic, self.group = topic, group
        self.batch_size, self.wait_s, self.stream = batch_size, wait_s, stream
        self.client_id = client_id or f"{socket.gethostname()}:{os.getpid()}"
        self.flow_control = flow_control or FlowControl()
        self._concurrency = concurrency
        self._settings, self._groups = settings, groups
        self._session_timeout = session_timeout
        self._transport, self._log = transport, logger
        self._m: _Machinery | None = None
        self._membership: Membership | None = None
        self._left = False
        self._stop_requested = False
        self._callbacks: dict[str, list[Callback]] = {name: [] for name in EVENTS}
        self._tasks: list[asyncio.Task[None]] = []
        self._in_hand: AsyncMessage | None = None
        self._iterating: asyncio.Task[Any] | None = None
        self._started = False
        self._receiving = False
        self._connected = False
        self._failures = 0
        self._fatal: BaseException | None = None
        self._server_window: int | None = None  # the window the server was last told
        self._handlers: set[asyncio.Future[None]] = set()

    # --- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> AsyncConsumer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def member_id(self) -> str | None:
        """The current member id (None before joining)."""
        membership = self._membership
        return None if membership is None else membership.member_id

    @property
    def assignments(self) -> tuple[int, ...]:
        """The partitions assigned at the last join or rejoin."""
        membership = self._membership
        return () if membership is None else membership.assignments

    @property
    def connected(self) -> bool:
        """Whether the last delivery request reached the server."""
        return self._connected

    @property
    def held(self) -> int:
        """Messages received and not settled yet (buffered, in handlers, in hand)."""
        return 0 if self._m is None else len(self._m.holdings)

    @property
    def _mach(self) -> _Machinery:
        if self._m is None:
            self._m = _Machinery(self, self.flow_control, self._concurrency)
            if self._stop_requested:
                self._m.stopping.set()
        return self._m

    async def join(self) -> Membership:
        """Configure the group when settings were given, join it (once), start heartbeating."""
        async with self._mach.lock:
            if self._membership is None:
                if self._settings.given():
                    await self._configure()
                self._membership = await self._join_request(None)
                self._server_window = self._window()
                self._spawn(self._heartbeat_loop())
            return self._membership

    def on(self, event: str, callback: Callback) -> Callback:
        """Call ``callback`` on ``event``: one of :data:`EVENTS`; it may be a coroutine function.

        ``message`` gets each :class:`AsyncMessage`, ``error`` each exception the consumer
        survives (refused acks included, one per request), and the one that stops it;
        ``rebalanced`` the new :class:`Membership`, ``reconnecting`` the attempt's number;
        ``connected`` and ``disconnected`` nothing.
        """
        if event not in self._callbacks:
            raise ValueError(f"unknown event {event!r}; one of {', '.join(EVENTS)}")
        self._callbacks[event].append(callback)
        return callback

    def on_message(self, handler: Callback) -> Callback:
        """Set the handler :meth:`start` runs for each message (usable as a decorator)."""
        self._callbacks["message"] = [handler]
        return handler

    def on_error(self, handler: Callback) -> Callback:
        """Add a handler for errors the consumer survives (and for the one that stops it)."""
        return self.on("error", handler)

    async def start(self, concurrency: int | None = None) -> None:
        """Join now, then deliver to the ``message`` handler in a background task.

        ``concurrency`` handlers run at once (default: the consumer's; see :meth:`run`).
        """
        handlers = self._callbacks["message"]
        if not handlers:
            raise RuntimeError("set a handler with on_message() before start()")
        if self._started or self._stop_requested:
            raise RuntimeError("this consumer was started already; make a new one")
        self._started = True
        self._set_concurrency(concurrency)
        await self._begin()
        self._spawn(self._run_reporting(handlers[0]))

    async def run(self, handler: Callback, concurrency: int | None = None) -> None:
        """Deliver every message to ``handler`` until :meth:`stop`; a fatal error is raised.

        A handler that raises has its message nacked with the exception's text (unless it
        settled the message itself); one that returns without acking leaves it to be
        delivered again after the ack timeout. With ``concurrency`` above 1, up to that many
        handlers run at once (messages may then finish out of order).
        """
        self._set_concurrency(concurrency)
        slots = asyncio.Semaphore(self._concurrency)
        async for message in self:
            if self._concurrency == 1:
                await self._dispatch(handler, message)
                continue
            await slots.acquire()
            running = asyncio.ensure_future(self._dispatch(handler, message))
            self._handlers.add(running)
            running.add_done_callback(self._handlers.discard)
            running.add_done_callback(lambda _: slots.release())
        if self._handlers:
            await asyncio.wait(set(self._handlers))

    async def stop(self, timeout_s: float = JOIN_TIMEOUT_S) -> None:
        """Let the message in hand be settled, send pending acks, leave the group, end the tasks.

        It waits up to ``timeout_s`` until the message being worked on is acked or nacked, or
        its handler returns. Leaving hands this member's partitions, and the messages it held
        unsettled, to the others at once. A stopped consumer cannot be started again.
        """
        self._stop_requested = True
        machinery = self._mach
        machinery.stopping.set()
        current = asyncio.current_task()
        inside = current in self._tasks or current in self._handlers
        if self._iterating not in (None, current) and not inside:
            await _wait_for_event(machinery.idle, timeout_s)
        handlers = {h for h in self._handlers if h is not current}
        if handlers:
            await asyncio.wait(handlers, timeout=timeout_s)
        await machinery.settler.close()
        await self._leave()
        others = [t for t in self._tasks if t is not current]
        if others:
            await asyncio.wait(others, timeout=timeout_s)
        for task in others:
            task.cancel()

    close = stop

    # --- delivery ----------------------------------------------------------------------------

    async def __aiter__(self) -> AsyncIterator[AsyncMessage]:
        """Messages as they arrive, until :meth:`stop`; fatal errors are raised."""
        if self._stop_requested:
            return
        await self._begin()
        self._iterating = asyncio.current_task()
        try:
            while True:
                message = await self._next()
                if message is None:
                    return
                self._hold(message)
                try:
                    yield message
                finally:
                    self._release()
        finally:
            self._iterating = None

    async def _begin(self) -> None:
        """Join, then receive and keep leases in the background (once)."""
        await self.join()
        if not self._receiving:
            self._receiving = True
            self._spawn(self._intake())
            self._spawn(self._mach.holdings.keep(self._mach.stopping))

    async def _next(self) -> AsyncMessage | None:
        """The next message to hand out (None once stopping); a fatal intake error is raised."""
        machinery, dropped = self._mach, 0
        while True:
            while machinery.buffer and not machinery.stopping.is_set():
                message = machinery.buffer.popleft()
                if message._member_id == self.member_id and machinery.holdings.usable(message):
                    if dropped:
                        await self._report_lost(dropped, "their leases ended while buffered")
                    return message
                machinery.holdings.release(message)
                dropped += message._member_id == self.member_id
            if self._fatal is not None:
                raise self._fatal
            if machinery.stopping.is_set():
                return None
            machinery.arrived.clear()
            await self._until_stopped(machinery.arrived.wait())

    def _hold(self, message: AsyncMessage) -> None:
        """``message`` is in the caller's hands: ``stop()`` waits until it is settled."""
        self._mach.idle.clear()
        self._in_hand = message

    def _release(self) -> None:
        self._in_hand = None
        self._mach.idle.set()

    def settled(self, message: AsyncMessage) -> None:
        """Record that ``message`` was acked or nacked: ``stop()`` need not wait for it."""
        message._settled = True
        if self._m is not None:
            self._m.holdings.release(message)
            if self._in_hand is message:
                self._m.idle.set()

    async def _intake(self) -> None:
        """Receive into the buffer until stopped; a fatal error is kept for the reader."""
        machinery = self._mach
        while not machinery.stopping.is_set():
            try:
                if self.stream:
                    await self._stream_once()
                elif await self._until_stopped(machinery.holdings.room.wait()) is not _STOPPED:
                    await self._pull_once()
                self._failures = 0
            except QueueCoreError as exc:
                try:
                    await self._recover(exc)
                except QueueCoreError as fatal:
                    self._fatal = fatal
                    machinery.arrived.set()
                    return

    def _arrive(self, message: AsyncMessage, size: int) -> None:
        """A delivered message: held (its lease kept from now on) and buffered."""
        machinery = self._mach
        machinery.holdings.add(message, size)
        machinery.buffer.append(message)
        machinery.arrived.set()

    async def _pull_once(self) -> None:
        member_id = self._current().member_id
        machinery = self._mach
        body: dict[str, Any] = {
            "maxMessages": max(1, min(self.batch_size, machinery.holdings.free)),
            "waitMs": round(self.wait_s * 1000),
        }
        if self._server_window != self._window():
            body["maxInFlight"] = self._window()
        answer = await self._until_stopped(
            self._transport.request(
                "POST",
                group_path(self.topic, self.group, "members", member_id, "pull"),
                json=body,
                idempotent=False,
                timeout_s=self._transport.timeout_s + self.wait_s,
            )
        )
        if answer is _STOPPED:
            return  # what it leased comes back to the group when this member leaves
        self._server_window = self._window()
        await self._set_connected(True)
        for wire in answer["messages"]:
            size = len(json.dumps(wire["data"])) + len(wire.get("key") or "")
            self._arrive(AsyncMessage.from_wire(wire, self, member_id), size)

    async def _stream_once(self) -> None:
        member_id = self._current().member_id
        where = group_path(self.topic, self.group, "members", member_id, "stream")
        window = self._window()
        async with self._transport.stream(
            "GET", where, read_timeout_s=STREAM_READ_TIMEOUT_S, params={"maxInFlight": window}
        ) as response:
            self._server_window = window
            await self._set_connected(True)
            request_id = response.headers.get("x-request-id", "")
            chunks, lines, events = response.aiter_text().__aiter__(), LineSplitter(), SseParser()
            try:
                while True:
                    chunk = await self._until_stopped(_next(chunks))
                    if chunk is _STOPPED or chunk is _END:
                        return
                    for line in lines.feed(str(chunk)):
                        self._on_event(events.feed(line), member_id, request_id)
            except httpx.TransportError as exc:
                message = f"the stream broke: {type(exc).__name__}: {exc}"
                raise APIConnectionError("CONNECTION_ERROR", message, None, request_id) from exc

    def _on_event(self, event: tuple[str, str] | None, member_id: str, request_id: str) -> None:
        """A ``message`` event is received; an ``error`` event (the stream's last) raises."""
        if event is None or event[0] not in ("message", "error"):
            return
        kind, data = event
        if kind == "error":
            raise error_from_event(json.loads(data), request_id)
        self._arrive(AsyncMessage.from_wire(json.loads(data), self, member_id), len(data))

    async def _until_stopped(self, work: Awaitable[Any]) -> Any:
        """``work``'s result, or :data:`_STOPPED` (``work`` cancelled) if ``stop()`` comes first."""
        task = asyncio.ensure_future(work)
        stopping = asyncio.ensure_future(self._mach.stopping.wait())
        try:
            done, _ = await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            if not task.done():
                task.cancel()
        return task.result() if task in done else _STOPPED

    async def _recover(self, exc: QueueCoreError) -> None:
        """Rejoin when the member is gone, back off on transient errors, raise the rest."""
        if self._mach.stopping.is_set():
            return
        if exc.code == "MEMBER_NOT_FOUND":
            await self._rejoin(lost=self.member_id)
            return
        if self.stream and _no_stream(exc):
            self._log.info("queuecore: no event stream on this server; pulling instead")
            self.stream = False
            return
        if not isinstance(exc, _TRANSIENT):
            raise exc
        await self._set_connected(False)
        await self._emit("error", exc)
        self._failures += 1
        await self._emit("reconnecting", self._failures)
        await _wait_for_event(self._mach.stopping, backoff_s(min(self._failures, 4)))

    async def _dispatch(self, handler: Callback, message: AsyncMessage) -> None:
        """Run the handler; a raise nacks the message, a return without settling lets it go."""
        try:
            await _call(handler, message)
            if not message.settled:
                self._mach.holdings.release(message)  # no longer kept: back after its lease
        except Exception as exc:
            await self._emit("error", exc)
            if not message.settled:
                text = f"{type(exc).__name__}: {exc}"[:4096]
                self.queue_nack(message, text, None, wait=False)

    async def _run_reporting(self, handler: Callback) -> None:
        """``run`` in the background task: a fatal error is reported and stops the consumer."""
        try:
            await self.run(handler)
        except Exception as exc:
            await self._emit("error", exc)
            self._stop_requested = True
            self._mach.stopping.set()
            await self._mach.settler.close()
            await self._leave()

    # --- settling ----------------------------------------------------------------------------

    def queue_ack(self, message: AsyncMessage, wait: bool) -> asyncio.Future[None] | None:
        """Queue ``message``'s ack; with ``wait``, a future of the server's verdict."""
        settler, holdings = self._mach.settler, self._mach.holdings
        stale = holdings.exactly_once and not holdings.usable(message)
        self.settled(message)
        if stale:
            return settler.refuse(message.ack_id, _STALE, wait)
        return settler.ack(message.ack_id, wait)

    def queue_nack(
        self, message: AsyncMessage, error: str | None, retry_delay: Duration | None, wait: bool
    ) -> asyncio.Future[Any] | None:
        """Queue ``message``'s nack; with ``wait``, a future of whether it was dead-lettered."""
        settler, holdings = self._mach.settler, self._mach.holdings
        stale = holdings.exactly_once and not holdings.usable(message)
        self.settled(message)
        if stale:
            return settler.refuse(message.ack_id, _STALE, wait)
        return settler.nack(message.ack_id, error or "", retry_delay, wait)

    async def extend_message(self, message: AsyncMessage, seconds: Duration) -> bool:
        """Extend one message's lease ``seconds`` from now; whether it was extended."""
        whole = max(1, math.ceil(duration_seconds(seconds)))
        return message.ack_id in await self._mach.holdings.extend([message], whole)

    async def ack(self, messages: Iterable[AsyncMessage]) -> list[AsyncMessage]:
        """Ack many messages, waiting for the verdicts; returns those refused."""
        chosen = list(messages)
        verdicts = [self.queue_ack(m, wait=True) for m in chosen]
        outcomes = await asyncio.gather(
            *[v for v in verdicts if v is not None], return_exceptions=True
        )
        refused = [m for m, outcome in zip(chosen, outcomes) if isinstance(outcome, AckRejected)]
        failed = [
            o for o in outcomes if isinstance(o, BaseException) and not isinstance(o, AckRejected)
        ]
        if failed:
            raise failed[0]
        return refused

    def _urgent(self, queued_acks: int) -> bool:
        """Whether queued acks hold back delivery: half the window waits for them."""
        return queued_acks >= max(1, self._mach.holdings.window // 2)

    async def _report(self, error: QueueCoreError) -> None:
        await self._emit("error", error)

    async def _report_lost(self, count: int, why: str) -> None:
        text = f"{count} message(s) dropped, {why}; the group delivers them again"
        await self._emit("error", LeaseExpired("LEASE_EXPIRED", text, None, ""))

    # --- helpers -----------------------------------------------------------------------------

    def _set_concurrency(self, concurrency: int | None) -> None:
        if concurrency is None:
            return
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self._concurrency = concurrency
        if self._m is not None:
            self._m.holdings.window = self._window()

    def _window(self) -> int:
        return self.flow_control.window(self._concurrency)

    def _holdings(self) -> Holdings | None:
        return None if self._m is None else self._m.holdings

    def _lock(self) -> asyncio.Lock:
        return self._mach.lock

    def _stopping(self) -> bool:
        return self._mach.stopping.is_set()

    async def _wait_stopping(self, timeout_s: float) -> bool:
        return await _wait_for_event(self._mach.stopping, timeout_s)

    def _spawn(self, work: Awaitable[None]) -> None:
        self._tasks.append(asyncio.ensure_future(work))

    async def _set_connected(self, connected: bool) -> None:
        if connected != self._connected:
            self._connected = connected
            await self._emit("connected" if connected else "disconnected")

    async def _emit(self, event: str, *args: Any) -> None:
        """Call the event's callbacks; an error without any is logged, one line, no traceback."""
        callbacks = list(self._callbacks[event])
        if event == "error" and not callbacks:
            self._log.warning("queuecore consumer %s/%s: %s", self.topic, self.group, args[0])
        for callback in callbacks:
            try:
                await _call(callback, *args)
            except Exception as exc:
                self._log.warning("queuecore consumer %s callback failed: %r", event, exc)


_STALE = "its lease had ended before the ack or nack (the message is delivered again)"


def _no_stream(exc: QueueCoreError) -> bool:
    """Whether opening the stream failed because this server has no such route.

    A missing route is a 404 with the generic code (or none), unlike ``MEMBER_NOT_FOUND``.
    """
    if exc.status == 404:
        return exc.code == "NOT_FOUND" or exc.code.startswith("HTTP_")
    return exc.status in _NO_STREAM
