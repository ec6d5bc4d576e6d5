"""Consuming in a group: membership, heartbeats, SSE or long-poll delivery, ack/nack/extend.

An :class:`AsyncConsumer` joins its group on first use (configuring the group first when
settings such as ``dead_letter`` were given) and keeps a heartbeat task that honours
``heartbeatIntervalMs`` and rejoins when told to (``shouldRejoin``). A member the server
reports gone (``404 MEMBER_NOT_FOUND``: evicted after a pause longer than its session
timeout, or lost with a restarted server) is replaced by a fresh join; messages received
under the old member are dropped, because their leases ended with it and the group delivers
them again.

Delivery is pushed over Server-Sent Events by default; when the server offers no stream
(404 without a QueueCore code, 405, 406, 501) the consumer falls back to long-poll pulls.
Pulls are not retried blindly: a pull whose answer is lost has still leased its messages to
this member. They come back after the group's ack timeout as ``attempt + 1`` (on
exactly-once topics they are never leased to two consumers at once). So the HTTP layer
retries a pull only when the server certainly did not run it (429, connection refused);
other failures are reported, and the loop reconnects after a backoff.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Iterable
from typing import Any, Callable

import httpx

from queuecore._acks import AckBatcher
from queuecore._http import Transport, backoff_s
from queuecore._sse import LineSplitter, SseParser
from queuecore.errors import (
    AckRejected,
    APIConnectionError,
    NotFound,
    QueueCoreError,
    RateLimited,
    ServerError,
    error_from_event,
)
from queuecore.groups import AsyncConsumerGroups, group_path
from queuecore.messages import AsyncMessage, GroupSettings, Membership
from queuecore.models import Duration, duration_wire

STREAM_READ_TIMEOUT_S = 45.0  # the server writes at least every 15 s on an idle stream
JOIN_TIMEOUT_S = 30.0  # how long stop() waits for the message in hand, then for the tasks
MAX_BATCH_SIZE = 1000  # the API's maxMessages per pull
MAX_WAIT_S = 30.0  # the API's longest long-poll (waitMs)
EVENTS = ("message", "error", "connected", "disconnected", "reconnecting", "rebalanced")
_TRANSIENT = (APIConnectionError, ServerError, RateLimited)
_NO_STREAM = frozenset({405, 406, 501})

Callback = Callable[..., Any]
_STOPPED = object()  # what a wait interrupted by stop() gives instead of a result
_END = object()  # the end of a stream


class _Signals:
    """The consumer's asyncio primitives, made on first use inside the running loop.

    Python 3.9 binds an ``asyncio.Event`` to the loop current when it is made, so they
    cannot be made in ``__init__`` (the synchronous client builds consumers on its own loop).
    """

    def __init__(self) -> None:
        self.stopping = asyncio.Event()
        self.idle = asyncio.Event()
        self.idle.set()
        self.lock = asyncio.Lock()


class AsyncConsumer:
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
    ) -> None:
        if not 1 <= batch_size <= MAX_BATCH_SIZE:
            raise ValueError(f"batch_size must be between 1 and {MAX_BATCH_SIZE}")
        if not 0 <= wait_s <= MAX_WAIT_S:
            raise ValueError(f"wait must be between 0 and {MAX_WAIT_S} seconds")
        self.topic, self.group = topic, group
        self.batch_size, self.wait_s, self.stream = batch_size, wait_s, stream
        self.client_id = client_id or f"{socket.gethostname()}:{os.getpid()}"
        self._settings, self._groups = settings, groups
        self._session_timeout = session_timeout
        self._transport, self._log = transport, logger
        self._signals: _Signals | None = None
        self._membership: Membership | None = None
        self._left = False
        self._stop_requested = False
        self._callbacks: dict[str, list[Callback]] = {name: [] for name in EVENTS}
        self._tasks: list[asyncio.Task[None]] = []
        self._in_hand: AsyncMessage | None = None
        self._iterating: asyncio.Task[Any] | None = None
        self._started = False
        self._connected = False
        self._failures = 0
        self._acks = AckBatcher(self.ack_ids)
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
    def _sig(self) -> _Signals:
        if self._signals is None:
            self._signals = _Signals()
            if self._stop_requested:
                self._signals.stopping.set()
        return self._signals

    async def join(self) -> Membership:
        """Configure the group when settings were given, join it (once), start heartbeating."""
        async with self._sig.lock:
            if self._membership is None:
                if self._settings.given():
                    await self._configure()
                self._membership = await self._join_request(None)
                self._spawn(self._heartbeat_loop())
            return self._membership

    def on(self, event: str, callback: Callback) -> Callback:
        """Call ``callback`` on ``event``: one of :data:`EVENTS`; it may be a coroutine function.

        ``message`` gets each :class:`AsyncMessage`, ``error`` each exception the consumer
        survives (and the one that stops it), ``rebalanced`` the new :class:`Membership`,
        ``reconnecting`` the number of the attempt; ``connected`` and ``disconnected`` nothing.
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

    async def start(self, concurrency: int = 1) -> None:
        """Join now, then deliver to the ``message`` handler in a background task.

        ``concurrency`` handlers run at once (see :meth:`run`).
        """
        handlers = self._callbacks["message"]
        if not handlers:
            raise RuntimeError("set a handler with on_message() before start()")
        if self._started or self._stop_requested:
            raise RuntimeError("this consumer was started already; make a new one")
        self._started = True
        await self.join()
        self._spawn(self._run_reporting(handlers[0], concurrency))

    async def run(self, handler: Callback, concurrency: int = 1) -> None:
        """Deliver every message to ``handler`` until :meth:`stop`; a fatal error is raised.

        A handler that raises has its message nacked with the exception's text (unless it
        settled the message itself); one that returns without acking leaves the message to
        be delivered again after the ack timeout. With ``concurrency`` above 1, up to that
        many handlers run at once (messages may then finish out of order), and their acks
        share requests.
        """
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        slots = asyncio.Semaphore(concurrency)
        async for message in self:
            if concurrency == 1:
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
        """Let the message in hand be settled, leave the group, and end the tasks.

        It waits up to ``timeout_s`` until the message being worked on is acked or nacked,
        or its handler returns. Leaving hands this member's partitions, and its unsettled
        messages, to the others at once. A stopped consumer cannot be started again.
        """
        self._stop_requested = True
        self._sig.stopping.set()
        current = asyncio.current_task()
        inside = current in self._tasks or current in self._handlers
        if self._iterating not in (None, current) and not inside:
            await _wait_for_event(self._sig.idle, timeout_s)
        handlers = {h for h in self._handlers if h is not current}
        if handlers:
            await asyncio.wait(handlers, timeout=timeout_s)
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
        await self.join()
        self._iterating = asyncio.current_task()
        try:
            while not self._sig.stopping.is_set():
                async for message in self._receive():
                    if message._member_id == self.member_id and not self._sig.stopping.is_set():
                        await self._hold(message)
                        try:
                            yield message
                        finally:
                            self._release()
                    if self._sig.stopping.is_set():
                        return
        finally:
            self._iterating = None

    async def _hold(self, message: AsyncMessage) -> None:
        """``message`` is in the caller's hands: ``stop()`` waits until it is settled."""
        self._sig.idle.clear()
        self._in_hand = message

    def _release(self) -> None:
        self._in_hand = None
        self._sig.idle.set()

    def settled(self, message: AsyncMessage) -> None:
        """Record that ``message`` was acked or nacked: ``stop()`` need not wait for it."""
        message._settled = True
        if self._in_hand is message and self._signals is not None:
            self._signals.idle.set()

    async def _receive(self) -> AsyncIterator[AsyncMessage]:
        """One pull's messages, or one stream's until it ends; recovers from what it can."""
        try:
            if self.stream:
                async for message in self._stream_once():
                    yield message
            else:
                for message in await self._pull_once():
                    yield message
            self._failures = 0
        except QueueCoreError as exc:
            await self._recover(exc)

    async def _pull_once(self) -> list[AsyncMessage]:
        member_id = self._current().member_id
        body = await self._until_stopped(
            self._transport.request(
                "POST",
                group_path(self.topic, self.group, "members", member_id, "pull"),
                json={"maxMessages": self.batch_size, "waitMs": round(self.wait_s * 1000)},
                idempotent=False,
                timeout_s=self._transport.timeout_s + self.wait_s,
            )
        )
        if body is _STOPPED:
            return []  # what it leased comes back to the group when this member leaves
        await self._set_connected(True)
        return [AsyncMessage.from_wire(m, self, member_id) for m in body["messages"]]

    async def _stream_once(self) -> AsyncIterator[AsyncMessage]:
        member_id = self._current().member_id
        where = group_path(self.topic, self.group, "members", member_id, "stream")
        async with self._transport.stream(
            "GET", where, read_timeout_s=STREAM_READ_TIMEOUT_S
        ) as response:
            await self._set_connected(True)
            request_id = response.headers.get("x-request-id", "")
            chunks, lines, events = response.aiter_text().__aiter__(), LineSplitter(), SseParser()
            try:
                while True:
                    chunk = await self._until_stopped(_next(chunks))
                    if chunk is _STOPPED or chunk is _END:
                        return
                    for line in lines.feed(str(chunk)):
                        delivered = self._from_event(events.feed(line), member_id, request_id)
                        if delivered is not None:
                            yield delivered
            except httpx.TransportError as exc:
                message = f"the stream broke: {type(exc).__name__}: {exc}"
                raise APIConnectionError("CONNECTION_ERROR", message, None, request_id) from exc

    def _from_event(
        self, event: tuple[str, str] | None, member_id: str, request_id: str
    ) -> AsyncMessage | None:
        """The message of a ``message`` event; an ``error`` event (the stream's last) raises."""
        if event is None or event[0] not in ("message", "error"):
            return None
        kind, data = event
        if kind == "error":
            raise error_from_event(json.loads(data), request_id)
        return AsyncMessage.from_wire(json.loads(data), self, member_id)

    async def _until_stopped(self, work: Awaitable[Any]) -> Any:
        """``work``'s result, or :data:`_STOPPED` (``work`` cancelled) if ``stop()`` comes first."""
        task = asyncio.ensure_future(work)
        stopping = asyncio.ensure_future(self._sig.stopping.wait())
        try:
            done, _ = await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            if not task.done():
                task.cancel()
        return task.result() if task in done else _STOPPED

    async def _recover(self, exc: QueueCoreError) -> None:
        """Rejoin when the member is gone, back off on transient errors, raise the rest."""
        if self._sig.stopping.is_set():
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
        await _wait_for_event(self._sig.stopping, backoff_s(min(self._failures, 4)))

    async def _dispatch(self, handler: Callback, message: AsyncMessage) -> None:
        try:
            await _call(handler, message)
        except Exception as exc:
            await self._emit("error", exc)
            if not message.settled:
                await self._nack_quietly(message, exc)

    async def _nack_quietly(self, message: AsyncMessage, exc: Exception) -> None:
        try:
            await message.nack(error=f"{type(exc).__name__}: {exc}"[:4096])
        except QueueCoreError as nack_error:
            await self._emit("error", nack_error)

    async def _run_reporting(self, handler: Callback, concurrency: int) -> None:
        """``run`` in the background task: a fatal error is reported and stops the consumer."""
        try:
            await self.run(handler, concurrency)
        except Exception as exc:
            await self._emit("error", exc)
            self._stop_requested = True
            self._sig.stopping.set()
            await self._leave()

    # --- settling ----------------------------------------------------------------------------

    async def ack(self, messages: Iterable[AsyncMessage]) -> list[AsyncMessage]:
        """Ack many messages in one request; returns those refused (expired or superseded)."""
        by_id = {m.ack_id: m for m in messages}
        try:
            answer = await self.ack_ids(list(by_id))
        except AckRejected:
            return list(by_id.values())
        for ack_id in answer["acked"]:
            self.settled(by_id[ack_id])
        return [by_id[r["ackId"]] for r in answer["rejected"]]

    async def ack_one(self, ack_id: str) -> None:
        """Ack one message, in one request with the acks made meanwhile by other handlers."""
        await self._acks.ack(ack_id)

    async def ack_ids(self, ack_ids: list[str]) -> dict[str, Any]:
        """``POST …/ack``: ``{"acked": [...], "rejected": [...]}``; a repeated ack is "acked"."""
        body = {"ackIds": ack_ids}
        answer = await self._transport.request(
            "POST", self._path("ack"), json=body, idempotent=True
        )
        return dict(answer)

    async def nack_id(self, ack_id: str, error: str | None, retry_delay: Duration | None) -> bool:
        """``POST …/nack``; whether the message went to the dead-letter queue."""
        body: dict[str, Any] = {"ackId": ack_id, "error": error or ""}
        if retry_delay is not None:
            body["retryDelay"] = duration_wire(retry_delay)
        # Not retried after a lost answer: a repeated nack is refused, its lease having ended.
        answer = await self._transport.request(
            "POST", self._path("nack"), json=body, idempotent=False
        )
        return bool(answer["deadLettered"])

    async def extend_ids(self, ack_ids: list[str], seconds: int) -> list[str]:
        """``POST …/extend``: the ids whose leases now end ``seconds`` from now."""
        body = {"ackIds": ack_ids, "seconds": seconds}
        answer = await self._transport.request(
            "POST", self._path("extend"), json=body, idempotent=True
        )
        return list(answer["extended"])

    # --- membership --------------------------------------------------------------------------

    async def _configure(self) -> None:
        settings = self._settings
        await self._groups.configure(
            self.topic,
            self.group,
            start_from=settings.start_from,  # type: ignore[arg-type]
            ack_timeout=settings.ack_timeout,
            max_in_flight=settings.max_in_flight,
            dead_letter=settings.dead_letter,
        )

    async def _join_request(self, member_id: str | None) -> Membership:
        body: dict[str, Any] = {"clientId": self.client_id[:200]}
        if member_id is not None:
            body["memberId"] = member_id
        if self._session_timeout is not None:
            body["sessionTimeout"] = duration_wire(self._session_timeout)
        # A rejoin with our id is idempotent; a first join would leave a second member behind.
        answer = await self._transport.request(
            "POST", self._path("members"), json=body, idempotent=member_id is not None
        )
        return Membership.from_wire(answer)

    async def _rejoin(self, lost: str | None) -> None:
        """Rejoin with our id (``shouldRejoin``), or as a new member when ``lost`` is gone."""
        async with self._sig.lock:
            current = self._membership
            if self._sig.stopping.is_set() or current is None:
                return
            if lost is not None and current.member_id != lost:
                return  # the other task replaced the lost member already
            try:
                fresh = await self._join_request(None if lost else current.member_id)
            except NotFound as exc:
                if exc.code != "MEMBER_NOT_FOUND":
                    raise
                fresh = await self._join_request(None)
            self._membership = fresh
        self._log.info(
            "queuecore consumer %s/%s rejoined as %s (partitions %s)",
            self.topic,
            self.group,
            fresh.member_id,
            fresh.assignments,
        )
        await self._emit("rebalanced", fresh)

    async def _heartbeat_loop(self) -> None:
        while not await _wait_for_event(self._sig.stopping, self._current().heartbeat_interval_s):
            try:
                await self._heartbeat()
            except Exception as exc:
                if not self._sig.stopping.is_set():
                    await self._emit("error", exc)

    async def _heartbeat(self) -> None:
        member_id = self._current().member_id
        try:
            answer = await self._transport.request(
                "POST", self._path("members", member_id, "heartbeat"), idempotent=True
            )
        except NotFound as exc:
            if exc.code != "MEMBER_NOT_FOUND":
                raise
            await self._rejoin(lost=member_id)
            return
        if answer["shouldRejoin"]:
            await self._rejoin(lost=None)

    async def _leave(self) -> None:
        membership = self._membership
        if membership is None or self._left:
            return
        self._left = True
        try:
            await self._transport.request(
                "DELETE", self._path("members", membership.member_id), idempotent=True
            )
        except NotFound:
            pass  # evicted already
        except QueueCoreError as exc:
            await self._emit("error", exc)  # the server evicts it after its session timeout
        await self._set_connected(False)

    # --- helpers -----------------------------------------------------------------------------

    def _current(self) -> Membership:
        membership = self._membership
        if membership is None:
            raise RuntimeError("the consumer has not joined its group")
        return membership

    def _path(self, *rest: str) -> str:
        return group_path(self.topic, self.group, *rest)

    def _spawn(self, work: Awaitable[None]) -> None:
        self._tasks.append(asyncio.ensure_future(work))

    async def _set_connected(self, connected: bool) -> None:
        if connected != self._connected:
            self._connected = connected
            await self._emit("connected" if connected else "disconnected")

    async def _emit(self, event: str, *args: Any) -> None:
        """Call the event's callbacks; an error without any is logged."""
        callbacks = list(self._callbacks[event])
        if event == "error" and not callbacks:
            exc = args[0]
            self._log.warning(
                "queuecore consumer %s/%s: %s", self.topic, self.group, exc, exc_info=exc
            )
        for callback in callbacks:
            try:
                await _call(callback, *args)
            except Exception:
                self._log.exception("queuecore consumer %s callback failed", event)


async def _next(chunks: AsyncIterator[str]) -> Any:
    """The next chunk, or :data:`_END`."""
    try:
        return await chunks.__anext__()
    except StopAsyncIteration:
        return _END


async def _call(callback: Callback, *args: Any) -> Any:
    """Call a plain function or a coroutine function alike."""
    result = callback(*args)
    if inspect.isawaitable(result):
        return await result
    return result


async def _wait_for_event(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for ``event``; whether it is set."""
    try:
        await asyncio.wait_for(event.wait(), timeout_s)
    except asyncio.TimeoutError:
        return False
    return True


def _no_stream(exc: QueueCoreError) -> bool:
    """Whether opening the stream failed because this server has no such route.

    A missing route is a 404 with the generic code (or none), unlike ``MEMBER_NOT_FOUND``.
    """
    if exc.status == 404:
        return exc.code == "NOT_FOUND" or exc.code.startswith("HTTP_")
    return exc.status in _NO_STREAM
