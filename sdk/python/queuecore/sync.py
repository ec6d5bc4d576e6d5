"""``QueueCore``: the synchronous client, a thin wrapper running :class:`AsyncQueueCore`.

Every call is handed to one private event loop on a daemon thread and waited for, so retries,
Server-Sent Events, heartbeats and models are the asynchronous client's own. A ``message``
handler runs in a worker thread (``asyncio.to_thread``), so a slow handler never holds up the
heartbeats; the other consumer callbacks run on the loop's thread and should be quick.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from datetime import datetime
from typing import Any, Callable, Literal, TypeVar, overload

from queuecore.client import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT_S,
    AsyncQueueCore,
    DeadLetterSettings,
)
from queuecore.consumer import AsyncConsumer, AsyncMessage, Callback, Membership
from queuecore.groups import (
    KEEP,
    AsyncConsumerGroups,
    AsyncDeadLetters,
    AsyncOffsets,
    AsyncRuntimeConfig,
    ResetTo,
    _Keep,
)
from queuecore.models import (
    UNSET,
    BatchResult,
    ConfigEntry,
    DeadLetter,
    DeadLetterPage,
    Duration,
    Fairness,
    FlowControl,
    Group,
    GroupStats,
    GroupSummary,
    OutgoingMessage,
    PartitionOffset,
    PublishBatching,
    PublishResult,
    Topic,
    Unset,
)
from queuecore.push import PushConfig, PushTestResult
from queuecore.topics import AsyncTopics

T = TypeVar("T")


class _LoopThread:
    """A private event loop running on a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._serve, name="queuecore-loop", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, work: Awaitable[T]) -> T:
        """Run ``work`` on the loop and wait for its result (or its exception)."""
        return self.submit(work).result()

    def submit(self, work: Awaitable[T]) -> Future[T]:
        """Run ``work`` on the loop; a future of its result."""
        if threading.current_thread() is self.thread:
            raise RuntimeError("a synchronous QueueCore call was made from its own callback")
        return asyncio.run_coroutine_threadsafe(_awaited(work), self.loop)

    def close(self) -> None:
        """Stop the loop and its thread."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


async def _awaited(work: Awaitable[T]) -> T:
    return await work


class Message:
    """A message leased to this consumer: settle it with :meth:`ack` or :meth:`nack`."""

    def __init__(self, inner: AsyncMessage, loop: _LoopThread) -> None:
        self._inner, self._loop = inner, loop

    def __repr__(self) -> str:
        return f"Message({self._inner!r})"

    message_id = property(lambda self: self._inner.message_id, doc="The message's id.")
    topic = property(lambda self: self._inner.topic, doc="Its topic.")
    partition = property(lambda self: self._inner.partition, doc="Its partition.")
    offset = property(lambda self: self._inner.offset, doc="Its offset in the partition.")
    data = property(lambda self: self._inner.data, doc="The JSON value published.")
    key = property(lambda self: self._inner.key, doc="Its key, if any.")
    headers = property(lambda self: self._inner.headers, doc="Its headers.")
    attempt = property(lambda self: self._inner.attempt, doc="1 on first delivery.")
    ack_id = property(lambda self: self._inner.ack_id, doc="The lease's id.")
    fairness_key = property(lambda self: self._inner.fairness_key, doc="Its fairness key, if any.")
    throttle_keys = property(
        lambda self: self._inner.throttle_keys, doc="Its throttle keys, if any."
    )
    settled = property(lambda self: self._inner.settled, doc="Acked or nacked here.")

    @property
    def timestamp(self) -> datetime:
        """When it was published."""
        return self._inner.timestamp

    def ack(self) -> None:
        """Mark the message done, in the background (no round trip of its own); a refusal goes
        to the consumer's ``error`` callback. :meth:`ack_with_result` waits for the verdict."""
        self._loop.run(self._inner.ack())

    def ack_with_result(self) -> None:
        """Ack and wait for the verdict; :class:`AckRejected` when its lease had ended."""
        self._loop.run(self._inner.ack_with_result())

    def nack(self, error: str | None = None, retry_delay: Duration | None = None) -> bool:
        """Fail the message: retried after ``retry_delay · 2^(attempt-1)``; True if dead-lettered."""
        return self._loop.run(self._inner.nack(error, retry_delay))

    def extend(self, seconds: Duration) -> bool:
        """Keep the lease ``seconds`` from now; False when it had already ended."""
        return self._loop.run(self._inner.extend(seconds))


class Consumer:
    """A member of a consumer group: iterate it, or give it a handler and ``start()`` it."""

    def __init__(self, inner: AsyncConsumer, loop: _LoopThread) -> None:
        self._inner, self._loop = inner, loop
        self._iteration: AsyncIterator[AsyncMessage] | None = None
        self._iterating_thread: int | None = None

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def member_id(self) -> str | None:
        """The current member id (None before joining)."""
        return self._inner.member_id

    @property
    def assignments(self) -> tuple[int, ...]:
        """The partitions assigned at the last join or rejoin."""
        return self._inner.assignments

    @property
    def connected(self) -> bool:
        """Whether the last delivery request reached the server."""
        return self._inner.connected

    def join(self) -> Membership:
        """Configure the group when settings were given, join it (once), start heartbeating."""
        return self._loop.run(self._inner.join())

    def on(self, event: str, callback: Callback) -> Callback:
        """As :meth:`AsyncConsumer.on`; a ``message`` callback runs in a worker thread."""
        self._inner.on(event, self._threaded(callback) if event == "message" else callback)
        return callback

    def on_message(self, handler: Callable[[Message], object]) -> Callable[[Message], object]:
        """Set the handler :meth:`start` runs for each message (usable as a decorator)."""
        self._inner.on_message(self._threaded(handler))
        return handler

    def on_error(self, handler: Callable[[Exception], object]) -> Callable[[Exception], object]:
        """Add a handler for errors the consumer survives (and for the one that stops it)."""
        self._inner.on_error(handler)
        return handler

    def start(self, concurrency: int | None = None) -> None:
        """Join now, then deliver to the ``on_message`` handler, in ``concurrency`` threads."""
        self._loop.run(self._inner.start(concurrency))

    def run(self, handler: Callable[[Message], object], concurrency: int | None = None) -> None:
        """Deliver every message to ``handler`` until :meth:`stop`; a fatal error is raised."""
        self._loop.run(self._inner.run(self._threaded(handler), concurrency))

    @property
    def held(self) -> int:
        """Messages received and not settled yet (buffered, in handlers, in hand)."""
        return self._inner.held

    def stop(self, timeout_s: float = 30.0) -> None:
        """Let the message in hand be settled, leave the group, and end the background work."""
        iteration = self._iteration
        if iteration is not None and self._iterating_thread == threading.get_ident():
            self._close_iteration(iteration)  # the caller gave up the message in hand
        self._loop.run(self._inner.stop(timeout_s))

    close = stop

    def __iter__(self) -> Iterator[Message]:
        """Messages as they arrive, until :meth:`stop`; fatal errors are raised."""
        iteration = self._inner.__aiter__()
        self._iteration, self._iterating_thread = iteration, threading.get_ident()
        try:
            while True:
                try:
                    inner = self._loop.run(iteration.__anext__())
                except StopAsyncIteration:
                    return
                yield Message(inner, self._loop)
        finally:
            self._close_iteration(iteration)

    def ack(self, messages: Iterable[Message]) -> list[Message]:
        """Ack many messages and wait for the verdicts; returns those refused."""
        by_inner = {id(m._inner): m for m in messages}
        refused = self._loop.run(self._inner.ack([m._inner for m in by_inner.values()]))
        return [by_inner[id(m)] for m in refused]

    def _close_iteration(self, iteration: AsyncIterator[AsyncMessage]) -> None:
        if self._iteration is iteration:
            self._iteration = self._iterating_thread = None
            closing = getattr(iteration, "aclose", None)
            if closing is not None and not self._loop.loop.is_closed():
                self._loop.run(closing())

    def _threaded(self, handler: Callable[[Message], object]) -> Callback:
        loop = self._loop

        async def in_thread(message: AsyncMessage) -> object:
            return await asyncio.to_thread(handler, Message(message, loop))

        return in_thread


class Topics:
    """The topics of the API key's environment (see :class:`AsyncTopics`)."""

    def __init__(self, inner: AsyncTopics, loop: _LoopThread) -> None:
        self._inner, self._loop = inner, loop

    def create(
        self,
        name: str,
        *,
        retention: str | None = None,
        delivery: str | None = None,
        partitions: int | None = None,
        latency_class: str | None = None,
        on_enqueue: str | None = None,
    ) -> Topic:
        """Create a topic; :class:`Conflict` (``TOPIC_EXISTS``) when the name is taken."""
        made = self._inner.create(
            name,
            retention=retention,
            delivery=delivery,
            partitions=partitions,
            latency_class=latency_class,
            on_enqueue=on_enqueue,
        )
        return self._loop.run(made)

    def list(self) -> builtins.list[Topic]:
        """Every active topic, by name."""
        return self._loop.run(self._inner.list())

    def describe(self, name: str) -> Topic:
        """One topic with its stats; :class:`NotFound` when it does not exist."""
        return self._loop.run(self._inner.describe(name))

    def update(
        self,
        name: str,
        *,
        partitions: int | None = None,
        retention: str | None = None,
        latency_class: str | None = None,
        on_enqueue: str | Unset | None = UNSET,
    ) -> Topic:
        """Raise the partition count, change retention or latency class, set or remove the
        ``on_enqueue`` hook."""
        changed = self._inner.update(
            name,
            partitions=partitions,
            retention=retention,
            latency_class=latency_class,
            on_enqueue=on_enqueue,
        )
        return self._loop.run(changed)

    def delete(self, name: str) -> Topic:
        """Delete a topic: its name is free at once, its data is removed in the background."""
        return self._loop.run(self._inner.delete(name))


class Offsets:
    """Where a group is in each partition, and moving it (see :class:`AsyncOffsets`)."""

    def __init__(self, inner: AsyncOffsets, loop: _LoopThread) -> None:
        self._inner, self._loop = inner, loop

    @overload
    def get(self, topic: str, group: str, partition: int) -> PartitionOffset: ...

    @overload
    def get(self, topic: str, group: str, partition: None = None) -> list[PartitionOffset]: ...

    def get(
        self, topic: str, group: str, partition: int | None = None
    ) -> PartitionOffset | list[PartitionOffset]:
        """One partition's ``current``, ``latest`` and ``lag``; every partition's without one."""
        if partition is None:
            return self._loop.run(self._inner.get(topic, group))
        return self._loop.run(self._inner.get(topic, group, partition))

    def seek(self, topic: str, group: str, partition: int, offset: int) -> PartitionOffset:
        """Deliver ``partition`` from ``offset`` on (admin scope)."""
        return self._loop.run(self._inner.seek(topic, group, partition, offset))

    def reset(self, topic: str, group: str, to: ResetTo) -> list[PartitionOffset]:
        """Move every partition (admin scope); :class:`Conflict` while the group has members."""
        return self._loop.run(self._inner.reset(topic, group, to))


class ConsumerGroups:
    """The consumer groups of a topic (see :class:`AsyncConsumerGroups`)."""

    def __init__(self, inner: AsyncConsumerGroups, loop: _LoopThread) -> None:
        self._inner, self._loop = inner, loop

    def list(self, topic: str) -> builtins.list[GroupSummary]:
        """``[GroupSummary(name, consumers, lag, dead_letters)]``."""
        return self._loop.run(self._inner.list(topic))

    def describe(self, topic: str, group: str) -> Group:
        """Members, partition owners, committed offsets, lag and settings."""
        return self._loop.run(self._inner.describe(topic, group))

    def configure(
        self,
        topic: str,
        group: str,
        *,
        start_from: Literal["earliest", "latest"] | None = None,
        ack_timeout: Duration | None = None,
        max_in_flight: int | None = None,
        session_timeout: Duration | None = None,
        dead_letter: DeadLetterSettings | None = None,
        push: PushConfig | _Keep | None = KEEP,
        rotate_secret: bool = False,
        fairness: Fairness | Mapping[str, Any] | Unset | None = UNSET,
        on_failure: str | Unset | None = UNSET,
    ) -> Group:
        """Create or change a group (admin scope); settings not given keep their current value.

        ``push`` makes it a push group (``None``: push off); ``push_secret`` of the answer that
        first turns it on, or rotates, holds the signing secret, once."""
        change = self._inner.configure(
            topic,
            group,
            start_from=start_from,
            ack_timeout=ack_timeout,
            max_in_flight=max_in_flight,
            session_timeout=session_timeout,
            dead_letter=dead_letter,
            push=push,
            rotate_secret=rotate_secret,
            fairness=fairness,
            on_failure=on_failure,
        )
        return self._loop.run(change)

    def test_push(self, topic: str, group: str) -> PushTestResult:
        """Send a signed ``push.test`` event to a push group's endpoint now: what it answered."""
        return self._loop.run(self._inner.test_push(topic, group))

    def stats(self, topic: str, group: str) -> GroupStats:
        """Depth, in flight, consumers, fairness keys, throttle keys, hook failures."""
        return self._loop.run(self._inner.stats(topic, group))

    def delete(self, topic: str, group: str) -> None:
        """Delete a group with its members and committed offsets (admin scope)."""
        self._loop.run(self._inner.delete(topic, group))

    def reset_offsets(self, topic: str, group: str, to: ResetTo) -> builtins.list[PartitionOffset]:
        """Move every partition to ``"earliest"``, ``"latest"`` or an offset (no members allowed)."""
        return self._loop.run(self._inner.reset_offsets(topic, group, to))


class DeadLetters:
    """A group's dead-letter queue (see :class:`AsyncDeadLetters`)."""

    def __init__(self, inner: AsyncDeadLetters, loop: _LoopThread) -> None:
        self._inner, self._loop = inner, loop

    def inspect(
        self, topic: str, group: str, *, limit: int = 100, after: str | None = None
    ) -> DeadLetterPage:
        """Up to ``limit`` dead letters oldest first, after the message id ``after``."""
        return self._loop.run(self._inner.inspect(topic, group, limit=limit, after=after))

    def messages(self, topic: str, group: str, *, page_size: int = 100) -> Iterator[DeadLetter]:
        """Every dead letter of the queue, page by page."""
        after: str | None = None
        while True:
            page = self.inspect(topic, group, limit=page_size, after=after)
            yield from page.messages
            if page.next_after is None:
                return
            after = page.next_after

    def replay(self, topic: str, group: str, message_id: str) -> int:
        """Deliver one dead letter to the group again, as attempt 1; returns 1."""
        return self._loop.run(self._inner.replay(topic, group, message_id))

    def replay_all(self, topic: str, group: str, *, count: int | None = None) -> int:
        """Deliver the dead letters again, oldest first: all, or at most ``count``."""
        return self._loop.run(self._inner.replay_all(topic, group, count=count))


class RuntimeConfig:
    """The environment's runtime configuration (see :class:`AsyncRuntimeConfig`)."""

    def __init__(self, inner: AsyncRuntimeConfig, loop: _LoopThread) -> None:
        self._inner, self._loop = inner, loop

    def set(self, key: str, value: str) -> ConfigEntry:
        """Set ``key`` (created or replaced)."""
        return self._loop.run(self._inner.set(key, value))

    def get(self, key: str) -> ConfigEntry:
        """The entry; :class:`NotFound` when it is not set."""
        return self._loop.run(self._inner.get(key))

    def list(self, prefix: str = "") -> builtins.list[ConfigEntry]:
        """The entries whose key starts with ``prefix``, by key."""
        return self._loop.run(self._inner.list(prefix))

    def delete(self, key: str) -> None:
        """Remove ``key``; :class:`NotFound` when it is not set."""
        self._loop.run(self._inner.delete(key))


class QueueCore:
    """The synchronous client: the same options and calls as :class:`AsyncQueueCore`."""

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
        logger: logging.Logger | None = None,
        idempotent_publish: bool = True,
        publish_batching: PublishBatching | None = None,
    ) -> None:
        self._async = AsyncQueueCore(
            api_key,
            base_url,
            timeout=timeout,
            max_retries=max_retries,
            logger=logger,
            idempotent_publish=idempotent_publish,
            publish_batching=publish_batching,
        )
        self._loop = _LoopThread()
        self.topics = Topics(self._async.topics, self._loop)
        self.offsets = Offsets(self._async.offsets, self._loop)
        self.consumer_groups = ConsumerGroups(self._async.consumer_groups, self._loop)
        self.dlq = DeadLetters(self._async.dlq, self._loop)
        self.config = RuntimeConfig(self._async.config, self._loop)

    def __repr__(self) -> str:
        return repr(self._async).replace("AsyncQueueCore", "QueueCore", 1)

    @property
    def base_url(self) -> str:
        """The API's address."""
        return self._async.base_url

    def __enter__(self) -> QueueCore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the pooled HTTP connections and the private event loop."""
        if not self._loop.loop.is_closed():
            self._loop.run(self._async.close())
        self._loop.close()

    def health(self) -> dict[str, Any]:
        """``GET /healthz``: the API process answers (no key needed)."""
        return self._loop.run(self._async.health())

    def ready(self) -> dict[str, Any]:
        """``GET /readyz``: PostgreSQL, S3 and Redis checks; :class:`Unavailable` when one fails."""
        return self._loop.run(self._async.ready())

    def publish(
        self,
        topic: str,
        data: Any,
        *,
        key: str | None = None,
        headers: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
        fairness_key: str | None = None,
        throttle_keys: Sequence[str] | None = None,
    ) -> PublishResult:
        """Publish one message (any JSON value); answered once it is durable.

        Calls made meanwhile from other threads go in the same batch request."""
        return self.publish_nowait(
            topic,
            data,
            key=key,
            headers=headers,
            idempotency_key=idempotency_key,
            fairness_key=fairness_key,
            throttle_keys=throttle_keys,
        ).result()

    def publish_nowait(
        self,
        topic: str,
        data: Any,
        *,
        key: str | None = None,
        headers: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
        fairness_key: str | None = None,
        throttle_keys: Sequence[str] | None = None,
    ) -> Future[PublishResult]:
        """Publish without waiting: a future of the :class:`PublishResult` (or of the error).

        Messages published this way from one thread are batched together too."""
        sent = self._async.publish(
            topic,
            data,
            key=key,
            headers=headers,
            idempotency_key=idempotency_key,
            fairness_key=fairness_key,
            throttle_keys=throttle_keys,
        )
        return self._loop.submit(sent)

    def find_published(self, topic: str, idempotency_key: str) -> PublishResult:
        """Where the message published with ``idempotency_key`` is stored (or :class:`NotFound`)."""
        return self._loop.run(self._async.find_published(topic, idempotency_key))

    def publish_batch(self, topic: str, messages: Iterable[OutgoingMessage | Any]) -> BatchResult:
        """Publish up to 1000 messages atomically: all get offsets in one commit, or none."""
        items = list(messages)
        return self._loop.run(self._async.publish_batch(topic, items))

    def consume(
        self,
        topic: str,
        group: str,
        *,
        start_from: Literal["earliest", "latest"] | None = None,
        ack_timeout: Duration | None = None,
        max_in_flight: int | None = None,
        dead_letter: DeadLetterSettings | None = None,
        session_timeout: Duration | None = None,
        batch_size: int = 10,
        wait: float = 10.0,
        stream: bool = True,
        client_id: str | None = None,
        concurrency: int = 1,
        flow_control: FlowControl | None = None,
    ) -> Consumer:
        """A consumer in ``group``; the options are :meth:`AsyncQueueCore.consume`'s."""
        inner = self._async.consume(
            topic,
            group,
            start_from=start_from,
            ack_timeout=ack_timeout,
            max_in_flight=max_in_flight,
            dead_letter=dead_letter,
            session_timeout=session_timeout,
            batch_size=batch_size,
            wait=wait,
            stream=stream,
            client_id=client_id,
            concurrency=concurrency,
            flow_control=flow_control,
        )
        return Consumer(inner, self._loop)
