"""``AsyncQueueCore``: the client object, publishing, and the entry points to every resource."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, Union

from queuecore._http import Transport
from queuecore._publisher import Publisher
from queuecore.consumer import AsyncConsumer, GroupSettings
from queuecore.errors import PublishOutcomeUnknown, QueueCoreError
from queuecore.groups import (
    AsyncConsumerGroups,
    AsyncDeadLetters,
    AsyncOffsets,
    AsyncRuntimeConfig,
)
from queuecore.models import (
    BatchResult,
    DeadLetterPolicy,
    Duration,
    FlowControl,
    OutgoingMessage,
    PublishBatching,
    PublishResult,
)
from queuecore.topics import AsyncTopics, path

DEFAULT_BASE_URL = "http://127.0.0.1:8080"
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_RETRIES = 3
MAX_BATCH = 1000
VERSION = "0.2.0"

DeadLetterSettings = Union[DeadLetterPolicy, Mapping[str, Any]]


def new_idempotency_key() -> str:
    """A fresh key for one message: ``sdk_`` + 32 hex characters."""
    return f"sdk_{uuid.uuid4().hex}"


def key_hint(key: str) -> str:
    """What ``repr`` shows of a key: its last four characters only."""
    return f"…{key[-4:]}" if len(key) > 15 else "…"


class AsyncQueueCore:
    """A client of one QueueCore environment (the API key's), for asyncio code.

    ``api_key`` and ``base_url`` default to ``QUEUECORE_API_KEY`` and ``QUEUECORE_URL``.
    ``timeout`` is in seconds. ``max_retries`` bounds the retries of one call (see the README
    for which calls are retried). ``logger`` receives one line per retry and per consumer
    event. With ``idempotent_publish`` (the default) every published message carries an
    idempotency key, generated once per call when not given and sent again on the call's
    retries, so a publish retried after a lost answer is stored once on an exactly-once topic.
    ``publish_batching`` says how concurrent :meth:`publish` calls share requests.
    """

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
        key = api_key or os.environ.get("QUEUECORE_API_KEY")
        if not key:
            raise ValueError("no API key: pass api_key= or set QUEUECORE_API_KEY")
        self.base_url = base_url or os.environ.get("QUEUECORE_URL") or DEFAULT_BASE_URL
        self.logger = logger or logging.getLogger("queuecore")
        self.idempotent_publish = idempotent_publish
        self._key_hint = key_hint(key)
        agent = f"queuecore-python/{VERSION}"
        self._transport = Transport(key, self.base_url, timeout, max_retries, self.logger, agent)
        self.topics = AsyncTopics(self._transport)
        self.offsets = AsyncOffsets(self._transport)
        self.consumer_groups = AsyncConsumerGroups(self._transport, self.offsets)
        self.dlq = AsyncDeadLetters(self._transport)
        self.config = AsyncRuntimeConfig(self._transport)
        self._publisher = Publisher(
            self._transport, publish_batching or PublishBatching(), self._resolve
        )

    def __repr__(self) -> str:
        return f"AsyncQueueCore(base_url={self.base_url!r}, api_key={self._key_hint!r})"

    async def __aenter__(self) -> AsyncQueueCore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Send the publishes waiting for their batch, then close the pooled HTTP connections
        (consumers made by this client stop working)."""
        await self._publisher.flush()
        await self._transport.close()

    async def health(self) -> dict[str, Any]:
        """``GET /healthz``: the API process answers (no key needed)."""
        return dict(await self._transport.request("GET", "/healthz", idempotent=True))

    async def ready(self) -> dict[str, Any]:
        """``GET /readyz``: PostgreSQL, S3 and Redis checks; :class:`Unavailable` when one fails."""
        return dict(await self._transport.request("GET", "/readyz", idempotent=True))

    async def publish(
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
        """Publish one message (any JSON value); answered once it is durable. ``fairness_key``
        and ``throttle_keys`` are what a fair group schedules it by.

        Calls made meanwhile (other tasks, other threads of :class:`QueueCore`) go in the same
        batch request (``publish_batching``); each gets its own result or its own error.
        """
        message = self._outgoing(
            OutgoingMessage(
                data,
                key,
                dict(headers or {}) or None,
                idempotency_key,
                fairness_key,
                None if throttle_keys is None else list(throttle_keys),
            )
        )
        return await self._publisher.publish(topic, message)

    async def find_published(self, topic: str, idempotency_key: str) -> PublishResult:
        """Where the message published with ``idempotency_key`` is stored, else NotFound."""
        body = await self._transport.request(
            "GET",
            path("topics", topic, "messages", "by-idempotency-key", idempotency_key),
            idempotent=True,
        )
        return PublishResult.from_wire({"latency": 0, **body}, idempotency_key)

    async def _resolve(
        self, topic: str, idempotency_key: str | None, unknown: PublishOutcomeUnknown
    ) -> PublishResult:
        """Settle an unknown outcome by the key: stored (its place) or raise ``unknown``."""
        unknown.idempotency_key = idempotency_key
        if idempotency_key is None:
            raise unknown
        try:
            return await self.find_published(topic, idempotency_key)
        except QueueCoreError:
            raise unknown from None

    async def publish_batch(
        self, topic: str, messages: Iterable[OutgoingMessage | Any]
    ) -> BatchResult:
        """Publish up to 1000 messages atomically: all get offsets in one commit, or none.

        An item that is an :class:`OutgoingMessage` brings its key, headers and idempotency
        key; any other item is the message's data as it is (a dict included).
        """
        wire = [self._outgoing(item) for item in messages]
        if not 1 <= len(wire) <= MAX_BATCH:
            raise ValueError(f"a batch holds 1 to {MAX_BATCH} messages, not {len(wire)}")
        answer = await self._transport.request(
            "POST",
            path("topics", topic, "messages", "batch"),
            json={"messages": wire},
            idempotent=all("idempotencyKey" in m for m in wire),
        )
        return BatchResult.from_wire(answer)

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
    ) -> AsyncConsumer:
        """A consumer in ``group``; it joins on ``start()``, ``run()`` or iteration.

        ``start_from``, ``ack_timeout``, ``max_in_flight`` and ``dead_letter`` (``max_retries``,
        ``retry_delay``, ``alert_threshold``) configure the group as it is joined (admin scope;
        settings not given are kept). ``session_timeout`` is this member's own. Messages are
        pushed over Server-Sent Events; with ``stream=False``, or on a server without the
        stream, up to ``batch_size`` messages are leased per pull, which waits up to ``wait``
        seconds. ``concurrency`` handlers run at once under ``start``/``run``;
        ``flow_control`` bounds what the consumer holds (10 messages per handler by default)
        and how long it keeps a lease.
        """
        settings = GroupSettings(start_from, ack_timeout, max_in_flight, dead_letter)
        return AsyncConsumer(
            self._transport,
            self.consumer_groups,
            topic,
            group,
            settings=settings,
            batch_size=batch_size,
            wait_s=wait,
            stream=stream,
            client_id=client_id,
            session_timeout=session_timeout,
            logger=self.logger,
            flow_control=flow_control,
            concurrency=concurrency,
        )

    def _outgoing(self, item: OutgoingMessage | Any) -> dict[str, Any]:
        """The wire shape of one message, with an idempotency key when publishing is idempotent."""
        message = item if isinstance(item, OutgoingMessage) else OutgoingMessage(item)
        wire: dict[str, Any] = {"data": message.data}
        if message.key is not None:
            wire["key"] = message.key
        if message.headers:
            wire["headers"] = dict(message.headers)
        if message.fairness_key is not None:
            wire["fairnessKey"] = message.fairness_key
        if message.throttle_keys is not None:
            wire["throttleKeys"] = list(message.throttle_keys)
        idempotency_key = message.idempotency_key
        if idempotency_key is None and self.idempotent_publish:
            idempotency_key = new_idempotency_key()
        if idempotency_key is not None:
            wire["idempotencyKey"] = idempotency_key
        return wire
