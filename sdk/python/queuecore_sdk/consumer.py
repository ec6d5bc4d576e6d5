"""Consuming in a group: membership, heartbeats, long-poll or SSE delivery, ack/nack/extend.

A :class:`Consumer` joins its group on first use and keeps a heartbeat thread that honours
``heartbeatIntervalMs`` and rejoins when told to (``shouldRejoin``). A member the server
reports gone (``404 MEMBER_NOT_FOUND``: evicted after a pause longer than its session
timeout) is replaced by a fresh join; messages received under the old member are dropped,
because their leases ended with it and the group delivers them again.

Pulls are not retried blindly: a pull whose answer is lost has still leased its messages to
this member, and nothing can ack them. They come back after the group's ack timeout as
``attempt + 1`` (on exactly-once topics they are never leased to two consumers at once). So
the HTTP layer retries a pull only when the server certainly did not run it (429, connection
refused); other failures are reported to the error handlers and the loop pulls again after
a backoff.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from queuecore_sdk._http import Transport, backoff_s
from queuecore_sdk._sse import sse_events
from queuecore_sdk.errors import (
    AckRejected,
    APIConnectionError,
    NotFound,
    QueueCoreError,
    RateLimited,
    ServerError,
    error_from_event,
)
from queuecore_sdk.groups import group_path
from queuecore_sdk.models import Duration, duration_wire, parse_time

STREAM_READ_TIMEOUT_S = 45.0  # the server writes at least every 15 s on an idle stream
JOIN_TIMEOUT_S = 30.0  # how long stop() waits for a running handler, then for the threads
MAX_BATCH_SIZE = 1000  # the API's maxMessages per pull
MAX_WAIT_S = 30.0  # the API's longest long-poll (waitMs)
_TRANSIENT = (APIConnectionError, ServerError, RateLimited)

MessageHandler = Callable[["Message"], object]
ErrorHandler = Callable[[Exception], object]


@dataclass(frozen=True, slots=True)
class Membership:
    """This consumer's identity in the group, its generation and partitions."""

    member_id: str
    generation_id: int
    assignments: tuple[int, ...]
    heartbeat_interval_s: float

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> Membership:
        """Build from the join answer."""
        return cls(
            body["memberId"],
            body["generationId"],
            tuple(body["assignments"]),
            body["heartbeatIntervalMs"] / 1000,
        )


@dataclass(eq=False, slots=True)
class Message:
    """A message leased to this consumer: settle it with :meth:`ack` or :meth:`nack`."""

    id: str
    topic: str
    partition: int
    offset: int
    data: Any
    key: str | None
    headers: dict[str, str]
    timestamp: datetime
    attempt: int
    ack_id: str
    _consumer: Consumer = field(repr=False)
    _member_id: str = field(repr=False)
    _settled: bool = field(default=False, repr=False)

    @classmethod
    def from_wire(cls, body: dict[str, Any], consumer: Consumer, member_id: str) -> Message:
        """Build from a delivered message's JSON."""
        return cls(
            body["id"],
            body["topic"],
            body["partition"],
            body["offset"],
            body["data"],
            body["key"],
            body["headers"],
            parse_time(body["timestamp"]),
            body["attempt"],
            body["ackId"],
            consumer,
            member_id,
        )

    @property
    def settled(self) -> bool:
        """Whether this message was acked or nacked through this object."""
        return self._settled

    def ack(self) -> None:
        """Mark the message done; :class:`AckRejected` when its lease expired or was superseded."""
        self._consumer.ack_ids([self.ack_id])
        self._consumer.settled(self)

    def nack(self, error: str | None = None, retry_delay: Duration | None = None) -> bool:
        """Fail the message: retried after ``retry_delay · 2^(attempt-1)``; True if dead-lettered."""
        dead = self._consumer.nack_id(self.ack_id, error, retry_delay)
        self._consumer.settled(self)
        return dead

    def extend(self, seconds: int) -> bool:
        """Keep the lease ``seconds`` from now; False when it had already ended."""
        return self._consumer.extend_ids([self.ack_id], seconds) == [self.ack_id]


class Consumer:
    """A member of a consumer group: iterate it, or give it a handler and ``start()`` it."""

    def __init__(
        self,
        transport: Transport,
        topic: str,
        group: str,
        *,
        batch_size: int = 10,
        wait_s: float = 10.0,
        stream: bool = False,
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
        self._session_timeout = session_timeout
        self._transport, self._log = transport, logger
        self._lock = threading.RLock()
        self._membership: Membership | None = None
        self._left = False
        self._stopping = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._handler: MessageHandler | None = None
        self._error_handlers: list[ErrorHandler] = []
        self._threads: list[threading.Thread] = []
        self._iterating: int | None = None  # ident of the thread iterating (or running handlers)
        self._in_hand: Message | None = None  # the message the caller is working on
        self._started = False
        self._failures = 0

    # --- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

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

    def join(self) -> Membership:
        """Join the group (once) and start heartbeating."""
        with self._lock:
            if self._membership is None:
                self._membership = self._join_request(None)
                self._spawn(self._heartbeat_loop, "heartbeat")
            return self._membership

    def on_message(self, handler: MessageHandler) -> MessageHandler:
        """Set the handler :meth:`start` runs for each message (usable as a decorator)."""
        self._handler = handler
        return handler

    def on_error(self, handler: ErrorHandler) -> ErrorHandler:
        """Add a handler for errors the consumer survives (and for the one that stops it)."""
        self._error_handlers.append(handler)
        return handler

    def start(self) -> None:
        """Join now, then deliver to the ``on_message`` handler on a background thread."""
        handler = self._handler
        if handler is None:
            raise RuntimeError("set a handler with on_message() before start()")
        if self._started or self._stopping.is_set():
            raise RuntimeError("this consumer was started already; make a new one")
        self._started = True
        self.join()
        self._spawn(lambda: self._run_reporting(handler), "worker")

    def run(self, handler: MessageHandler) -> None:
        """Deliver every message to ``handler`` until :meth:`stop`; a fatal error is raised.

        A handler that raises has its message nacked with the exception's text (unless it
        settled the message itself); one that returns without acking leaves the message to
        be delivered again after the ack timeout.
        """
        for message in self:
            self._dispatch(handler, message)

    def stop(self, timeout_s: float = JOIN_TIMEOUT_S) -> None:
        """Let the message in hand be settled, leave the group, and end the threads.

        Called from another thread than the one iterating (or running the handler), it waits
        up to ``timeout_s`` until the message being worked on is acked or nacked, or its
        handler returns. Leaving hands this member's partitions, and its unsettled messages,
        to the others at once: a lease ends when its member leaves. A stopped consumer cannot
        be started again.
        """
        self._stopping.set()
        if self._iterating not in (None, threading.get_ident()):
            self._idle.wait(timeout_s)
        self._leave()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout_s)

    close = stop

    # --- delivery ----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Message]:
        """Messages as they arrive, until :meth:`stop`; fatal errors are raised."""
        if self._stopping.is_set():
            return
        self.join()
        self._iterating = threading.get_ident()
        while not self._stopping.is_set():
            for message in self._receive():
                if message._member_id == self.member_id:
                    yield from self._hand_over(message)
                if self._stopping.is_set():
                    return

    def _hand_over(self, message: Message) -> Iterator[Message]:
        """Yield ``message`` unless stopping; until it is settled, ``stop()`` waits."""
        self._idle.clear()
        try:
            if not self._stopping.is_set():  # checked after clearing: stop() cannot slip between
                self._in_hand = message
                yield message
        finally:
            self._in_hand = None
            self._idle.set()

    def settled(self, message: Message) -> None:
        """Record that ``message`` was acked or nacked: ``stop()`` need not wait for it."""
        message._settled = True
        if self._in_hand is message:
            self._idle.set()

    def _receive(self) -> Iterator[Message]:
        """One pull's messages, or one stream's until it ends; recovers from what it can."""
        try:
            yield from self._stream_once() if self.stream else self._pull_once()
            self._failures = 0
        except QueueCoreError as exc:
            self._recover(exc)

    def _pull_once(self) -> list[Message]:
        member_id = self._current().member_id
        body = self._transport.request(
            "POST",
            group_path(self.topic, self.group, "members", member_id, "pull"),
            json={"maxMessages": self.batch_size, "waitMs": round(self.wait_s * 1000)},
            idempotent=False,
            timeout_s=self._transport.timeout_s + self.wait_s,
        )
        return [Message.from_wire(m, self, member_id) for m in body["messages"]]

    def _stream_once(self) -> Iterator[Message]:
        member_id = self._current().member_id
        where = group_path(self.topic, self.group, "members", member_id, "stream")
        with self._transport.stream("GET", where, read_timeout_s=STREAM_READ_TIMEOUT_S) as response:
            request_id = response.headers.get("x-request-id", "")
            try:
                for kind, data in sse_events(response.iter_lines()):
                    if kind == "error":
                        raise error_from_event(json.loads(data), request_id)
                    if kind == "message":
                        yield Message.from_wire(json.loads(data), self, member_id)
            except httpx.TransportError as exc:
                message = f"the stream broke: {type(exc).__name__}: {exc}"
                raise APIConnectionError("CONNECTION_ERROR", message, None, request_id) from exc

    def _recover(self, exc: QueueCoreError) -> None:
        """Rejoin when the member is gone, back off on transient errors, raise the rest."""
        if self._stopping.is_set():
            return
        if exc.code == "MEMBER_NOT_FOUND":
            self._rejoin(lost=self.member_id)
            return
        if not isinstance(exc, _TRANSIENT):
            raise exc
        self._report(exc)
        self._failures += 1
        self._stopping.wait(backoff_s(min(self._failures, 4)))

    def _dispatch(self, handler: MessageHandler, message: Message) -> None:
        try:
            handler(message)
        except Exception as exc:
            self._report(exc)
            if not message.settled:
                self._nack_quietly(message, exc)

    def _nack_quietly(self, message: Message, exc: Exception) -> None:
        try:
            message.nack(error=f"{type(exc).__name__}: {exc}"[:4096])
        except QueueCoreError as nack_error:
            self._report(nack_error)

    def _run_reporting(self, handler: MessageHandler) -> None:
        """``run`` on the worker thread: a fatal error is reported and stops the consumer."""
        try:
            self.run(handler)
        except Exception as exc:
            self._report(exc)
            self._stopping.set()
            self._leave()

    # --- settling ----------------------------------------------------------------------------

    def ack(self, messages: Iterable[Message]) -> list[Message]:
        """Ack many messages in one request; returns those refused (expired or superseded)."""
        by_id = {m.ack_id: m for m in messages}
        try:
            answer = self.ack_ids(list(by_id))
        except AckRejected:
            return list(by_id.values())
        for ack_id in answer["acked"]:
            self.settled(by_id[ack_id])
        return [by_id[r["ackId"]] for r in answer["rejected"]]

    def ack_ids(self, ack_ids: list[str]) -> dict[str, Any]:
        """``POST …/ack``: ``{"acked": [...], "rejected": [...]}``; a repeated ack is "acked"."""
        return dict(
            self._transport.request(
                "POST", self._path("ack"), json={"ackIds": ack_ids}, idempotent=True
            )
        )

    def nack_id(self, ack_id: str, error: str | None, retry_delay: Duration | None) -> bool:
        """``POST …/nack``; whether the message went to the dead-letter queue."""
        body: dict[str, Any] = {"ackId": ack_id, "error": error or ""}
        if retry_delay is not None:
            body["retryDelay"] = duration_wire(retry_delay)
        # Not retried after a lost answer: a repeated nack is refused, its lease having ended.
        answer = self._transport.request("POST", self._path("nack"), json=body, idempotent=False)
        return bool(answer["deadLettered"])

    def extend_ids(self, ack_ids: list[str], seconds: int) -> list[str]:
        """``POST …/extend``: the ids whose leases now end ``seconds`` from now."""
        body = {"ackIds": ack_ids, "seconds": seconds}
        answer = self._transport.request("POST", self._path("extend"), json=body, idempotent=True)
        return list(answer["extended"])

    # --- membership --------------------------------------------------------------------------

    def _join_request(self, member_id: str | None) -> Membership:
        body: dict[str, Any] = {"clientId": self.client_id[:200]}
        if member_id is not None:
            body["memberId"] = member_id
        if self._session_timeout is not None:
            body["sessionTimeout"] = duration_wire(self._session_timeout)
        # A rejoin with our id is idempotent; a first join would leave a second member behind.
        answer = self._transport.request(
            "POST", self._path("members"), json=body, idempotent=member_id is not None
        )
        return Membership.from_wire(answer)

    def _rejoin(self, lost: str | None) -> None:
        """Rejoin with our id (``shouldRejoin``), or as a new member when ``lost`` is gone."""
        with self._lock:
            current = self._membership
            if self._stopping.is_set() or current is None:
                return
            if lost is not None and current.member_id != lost:
                return  # the other thread replaced the lost member already
            try:
                self._membership = self._join_request(None if lost else current.member_id)
            except NotFound as exc:
                if exc.code != "MEMBER_NOT_FOUND":
                    raise
                self._membership = self._join_request(None)
            self._log.info(
                "queuecore consumer %s/%s rejoined as %s (partitions %s)",
                self.topic,
                self.group,
                self._membership.member_id,
                self._membership.assignments,
            )

    def _heartbeat_loop(self) -> None:
        while not self._stopping.wait(self._current().heartbeat_interval_s):
            try:
                self._heartbeat()
            except Exception as exc:
                if not self._stopping.is_set():
                    self._report(exc)

    def _heartbeat(self) -> None:
        member_id = self._current().member_id
        try:
            answer = self._transport.request(
                "POST", self._path("members", member_id, "heartbeat"), idempotent=True
            )
        except NotFound as exc:
            if exc.code != "MEMBER_NOT_FOUND":
                raise
            self._rejoin(lost=member_id)
            return
        if answer["shouldRejoin"]:
            self._rejoin(lost=None)

    def _leave(self) -> None:
        with self._lock:
            membership = self._membership
            if membership is None or self._left:
                return
            self._left = True
        try:
            self._transport.request(
                "DELETE", self._path("members", membership.member_id), idempotent=True
            )
        except NotFound:
            pass  # evicted already
        except QueueCoreError as exc:
            self._report(exc)  # the server evicts it after its session timeout

    # --- helpers -----------------------------------------------------------------------------

    def _current(self) -> Membership:
        membership = self._membership
        if membership is None:
            raise RuntimeError("the consumer has not joined its group")
        return membership

    def _path(self, *rest: str) -> str:
        return group_path(self.topic, self.group, *rest)

    def _spawn(self, target: Callable[[], None], role: str) -> None:
        name = f"queuecore-{role}-{self.topic}/{self.group}"
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _report(self, exc: Exception) -> None:
        """Tell the error handlers; without any, log it."""
        if not self._error_handlers:
            self._log.warning(
                "queuecore consumer %s/%s: %s", self.topic, self.group, exc, exc_info=exc
            )
        for handler in self._error_handlers:
            try:
                handler(exc)
            except Exception:
                self._log.exception("queuecore consumer error handler failed")
