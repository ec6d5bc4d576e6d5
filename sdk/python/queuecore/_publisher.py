"""``publish`` one message at a time, sent together: concurrent calls share batch requests.

Each call joins its topic's pending messages. They go in one request once ``max_messages`` or
``max_bytes`` are waiting, or ``linger`` after the first, whichever comes first. One request per
topic is in flight at a time, so the messages of one key keep their order; what arrives meanwhile
goes in the next request as soon as the answer is in (under load, batches fill by themselves).

Each caller gets its own result or its own error. A lone message goes to ``POST …/messages``;
several to ``…/messages/batch``, which is atomic: when the server refuses a batch for a message's
content (400, 413, 422) nothing of it was stored, and it is split in halves and sent again until
the offending message stands alone, so the others are stored and only its caller gets the error.
Their idempotency keys make every repeat safe.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Callable

from queuecore._http import Transport
from queuecore.errors import PublishOutcomeUnknown, QueueCoreError
from queuecore.models import PublishBatching, PublishResult, parse_time
from queuecore.topics import path

CONTENT_REFUSALS = frozenset({400, 413, 422})  # a message's own fault: split and send again
Resolve = Callable[[str, "str | None", PublishOutcomeUnknown], Awaitable[PublishResult]]


@dataclass
class _Pending:
    """One caller's message: its wire form, its encoding, and where its answer goes."""

    wire: dict[str, Any]
    body: bytes
    done: asyncio.Future[PublishResult]


@dataclass
class _Topic:
    """A topic's messages waiting to be sent."""

    waiting: deque[_Pending] = field(default_factory=deque)
    size: int = 0
    timer: asyncio.TimerHandle | None = None
    sending: asyncio.Task[None] | None = None


class Publisher:
    """Coalesces single publishes into batch requests, per topic."""

    def __init__(self, transport: Transport, settings: PublishBatching, resolve: Resolve) -> None:
        self._transport = transport
        self._settings = settings
        self._resolve = resolve
        self._topics: dict[str, _Topic] = {}

    async def publish(self, topic: str, wire: dict[str, Any]) -> PublishResult:
        """Send ``wire`` with the messages published meanwhile; its own result or error."""
        body = json.dumps(wire, separators=(",", ":"), ensure_ascii=False).encode()
        done: asyncio.Future[PublishResult] = asyncio.get_running_loop().create_future()
        queue = self._topics.setdefault(topic, _Topic())
        queue.waiting.append(_Pending(wire, body, done))
        queue.size += len(body)
        done.add_done_callback(_retrieved)
        self._kick(topic, queue)
        return await asyncio.shield(done)  # a cancelled caller's message may still be stored

    async def flush(self) -> None:
        """Send everything waiting now, and wait for the answers."""
        for topic, queue in list(self._topics.items()):
            if queue.waiting and queue.sending is None:
                self._start(topic, queue)
        sending = [q.sending for q in self._topics.values() if q.sending is not None]
        if sending:
            await asyncio.gather(*sending, return_exceptions=True)

    def _kick(self, topic: str, queue: _Topic) -> None:
        """Send now when a batch is full, else within ``linger`` (unless one is in flight)."""
        if queue.sending is not None:
            return  # its end sends what waits
        settings = self._settings
        full = len(queue.waiting) >= settings.max_messages or queue.size >= settings.max_bytes
        if full or settings.linger == 0:
            self._start(topic, queue)
        elif queue.timer is None:
            loop = asyncio.get_running_loop()
            queue.timer = loop.call_later(settings.linger, self._start, topic, queue)

    def _start(self, topic: str, queue: _Topic) -> None:
        if queue.timer is not None:
            queue.timer.cancel()
            queue.timer = None
        if queue.sending is None and queue.waiting:
            queue.sending = asyncio.ensure_future(self._drain(topic, queue))

    async def _drain(self, topic: str, queue: _Topic) -> None:
        try:
            while queue.waiting:
                await self._send(topic, self._take(queue))
        finally:
            queue.sending = None
            if not queue.waiting:
                self._topics.pop(topic, None)

    def _take(self, queue: _Topic) -> list[_Pending]:
        """The oldest waiting messages that fit one request."""
        batch: list[_Pending] = []
        size = 0
        settings = self._settings
        while queue.waiting and len(batch) < settings.max_messages:
            item = queue.waiting[0]
            if batch and size + len(item.body) > settings.max_bytes:
                break
            batch.append(queue.waiting.popleft())
            size += len(item.body)
        queue.size -= size
        return batch

    async def _send(self, topic: str, batch: list[_Pending]) -> None:
        """One request for ``batch``; every caller settled, whatever happens."""
        try:
            if len(batch) == 1:
                await self._send_one(topic, batch[0])
            else:
                await self._send_many(topic, batch)
        except QueueCoreError as exc:
            if len(batch) > 1 and exc.status in CONTENT_REFUSALS:
                half = len(batch) // 2
                await self._send(topic, batch[:half])
                await self._send(topic, batch[half:])
            else:
                _fail(batch, exc)
        except Exception as exc:  # a bug or a cancelled flush: never leave a caller waiting
            _fail(batch, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise

    async def _send_one(self, topic: str, item: _Pending) -> None:
        key = item.wire.get("idempotencyKey")
        try:
            answer = await self._transport.request(
                "POST",
                path("topics", topic, "messages"),
                content=item.body,
                idempotent=key is not None,
            )
            result = PublishResult.from_wire(answer, key)
        except PublishOutcomeUnknown as exc:
            result = await self._settled_by_key(topic, key, exc)
        _succeed(item, result)

    async def _send_many(self, topic: str, batch: list[_Pending]) -> None:
        body = b'{"messages":[' + b",".join(item.body for item in batch) + b"]}"
        keys = [item.wire.get("idempotencyKey") for item in batch]
        try:
            answer = await self._transport.request(
                "POST",
                path("topics", topic, "messages", "batch"),
                content=body,
                idempotent=all(k is not None for k in keys),
            )
        except PublishOutcomeUnknown as exc:
            for item, key in zip(batch, keys):
                await self._settle_unknown(topic, item, key, exc)
            return
        for item, key, stored in zip(batch, keys, answer["results"]):
            _succeed(item, _result(stored, answer["latency"], key))

    async def _settled_by_key(
        self, topic: str, key: str | None, unknown: PublishOutcomeUnknown
    ) -> PublishResult:
        """Where the message of ``key`` was stored; :class:`PublishOutcomeUnknown` if unknown."""
        own = PublishOutcomeUnknown(
            unknown.code, unknown.message, unknown.status, unknown.request_id, unknown.body
        )
        return await self._resolve(topic, key, own)

    async def _settle_unknown(
        self, topic: str, item: _Pending, key: str | None, unknown: PublishOutcomeUnknown
    ) -> None:
        """One message of a batch whose outcome is unknown: looked up by its key."""
        try:
            _succeed(item, await self._settled_by_key(topic, key, unknown))
        except QueueCoreError as exc:
            _fail([item], exc)


def _result(stored: dict[str, Any], latency_ms: int, key: str | None) -> PublishResult:
    return PublishResult(
        stored["messageId"],
        stored["offset"],
        stored["partition"],
        parse_time(stored["timestamp"]),
        latency_ms,
        key,
    )


def _succeed(item: _Pending, result: PublishResult) -> None:
    if not item.done.done():
        item.done.set_result(result)


def _fail(batch: list[_Pending], error: BaseException) -> None:
    for item in batch:
        if not item.done.done():
            item.done.set_exception(error)


def _retrieved(done: asyncio.Future[PublishResult]) -> None:
    """Mark the outcome seen, so a caller that was cancelled leaves no warning behind."""
    if not done.cancelled():
        done.exception()
