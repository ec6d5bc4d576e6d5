"""Publishing: tier limits, partition choice, idempotency, and the hand-off to the writer.

Partitioner: a message with a ``key`` goes to ``(murmur2(utf8(key)) & 0x7fffffff) % partitions``,
Kafka's default partitioner, so a key lands where a Kafka producer would put it for the same
partition count. Keyless messages are sticky per flush (Kafka's sticky partitioner, with the
writer's flush as the batch): all keyless messages of a topic that wait for the same flush go to
one partition, and each new flush moves the topic on to its next partition (from a random start
per process). So keyless publishes still spread evenly over every partition, but a flush writes
one block and locks one partition row per topic instead of all of them, which keeps concurrent
flushes of several API processes from queueing behind each other's commits.

Message ids: ``msg_`` + 20 base62 characters (``0-9A-Za-z``): 9 encoding the 48-bit number
``crc32(utf8(topic_id)) << 16 | partition``, then 11 encoding the 64-bit offset, both
big-endian and zero-padded; :func:`parse_message_id` gives the partition and offset back (and
rejects an id of another topic).

Idempotency (both delivery kinds: a retry after an unknown outcome must not store a message
twice, whatever the topic's delivery; docs/faults.md): a key already committed within the topic's retention is answered from ``idempotency_keys`` without
writing anything; a key being written by another request of this process waits for that
request's answer; across processes the writer's flush inserts the keys in its transaction with
``ON CONFLICT`` (taking over only an expired key), and a live duplicate rolls the flush back and
re-runs it without that message, which is answered with the winner's offset. Messages of one
batch with the same key get one offset; a batch whose keys were partly committed before stores
only the new messages, atomically, and answers the others with their original offsets.
"""

from __future__ import annotations

import asyncio
import functools
import random
import struct
import time
import zlib
from dataclasses import dataclass
from typing import NamedTuple

import msgspec
from msgspec import Raw

from core.db import AsyncPool
from data_plane.errors import (
    IdempotencyKeyNotFound,
    MessageTooLarge,
    PublishUnavailable,
    QuotaExceeded,
    TopicNotFound,
)
from data_plane.hooks import queries as hq
from data_plane.hooks.enqueue import ON_ENQUEUE, EnqueueHook
from data_plane.hooks.errors import HookErrors
from data_plane.hooks.sandbox import HookCache, InvalidHook
from data_plane.topics import service as topic_service
from data_plane.topics.schemas import PublishRequest
from data_plane.write import queries as q
from data_plane.write.accounting import Accounting, Producer, PublishRecord, UsageSink
from data_plane.write.segment import Message, Schedule
from data_plane.write.writer import (
    MESSAGE_OVERHEAD_BYTES,
    Entry,
    Placement,
    SegmentWriter,
    TopicTarget,
    consume_exception,
    epoch_ms,
)
from tenants import service as tenants
from tenants.tiers import Limits, tier_weight

BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_BASE62_INDEX = {c: i for i, c in enumerate(BASE62)}
MESSAGE_ID_PREFIX = "msg_"
_PREFIX_CHARS = 9  # crc32(topic_id) << 16 | partition: 48 bits < 62**9
_OFFSET_CHARS = 11  # a 64-bit offset < 62**11
_LOW_RANGE = 62**4
_BASE62_PAIRS = [high + low for high in BASE62 for low in BASE62]
ROUTE_TTL_S = 2.0
MAX_CACHED_ROUTES = 100_000


# --- message ids and partitioning --------------------------------------------------------------


def message_id(topic_id: str, partition: int, offset: int) -> str:
    """The stable id of the message at (topic, partition, offset)."""
    high, low = divmod(offset, _LOW_RANGE)  # the high digits change once in 14.7 M offsets
    return (
        _id_prefix(topic_id, partition)
        + _offset_high(high)
        + _BASE62_PAIRS[low // 3844]
        + _BASE62_PAIRS[low % 3844]
    )


def parse_message_id(topic_id: str, text: str) -> tuple[int, int] | None:
    """``(partition, offset)`` of a message id of this topic, or None."""
    body = text.removeprefix(MESSAGE_ID_PREFIX)
    if len(body) != _PREFIX_CHARS + _OFFSET_CHARS or body == text:
        return None
    where, offset = _unbase62(body[:_PREFIX_CHARS]), _unbase62(body[_PREFIX_CHARS:])
    if where is None or offset is None or where >> 16 != zlib.crc32(topic_id.encode()):
        return None
    if offset >= 1 << 64:
        return None
    return where & 0xFFFF, offset


@functools.lru_cache(maxsize=1024)
def _offset_high(high: int) -> str:
    return _base62(high, _OFFSET_CHARS - 4)


@functools.lru_cache(maxsize=65_536)
def _id_prefix(topic_id: str, partition: int) -> str:
    where = (zlib.crc32(topic_id.encode()) << 16) | partition
    return MESSAGE_ID_PREFIX + _base62(where, _PREFIX_CHARS)


def _base62(value: int, width: int) -> str:
    """``value`` in ``width`` base62 digits, two digits per step (ids are made per message)."""
    pairs = []
    for _ in range(width // 2):
        value, pair = divmod(value, 3844)
        pairs.append(_BASE62_PAIRS[pair])
    if width % 2:
        pairs.append(BASE62[value % 62])
    return "".join(reversed(pairs))


def _unbase62(text: str) -> int | None:
    value = 0
    for char in text:
        digit = _BASE62_INDEX.get(char)
        if digit is None:
            return None
        value = value * 62 + digit
    return value


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash (unsigned 32-bit), as its default partitioner computes it."""
    m, mask = 0x5BD1E995, 0xFFFF_FFFF
    length = len(data)
    h = 0x9747B28C ^ length
    for (k,) in struct.iter_unpack("<I", data[: length - length % 4]):
        k = (k * m) & mask
        k ^= k >> 24
        h = ((h * m) & mask) ^ ((k * m) & mask)
    tail = data[length - length % 4 :]
    if tail:
        for shift, byte in reversed(list(enumerate(tail))):
            h ^= byte << (8 * shift)
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    return h ^ (h >> 15)


def partition_for_key(key: bytes, partitions: int) -> int:
    """Same key, same partition (for a given partition count)."""
    return (murmur2(key) & 0x7FFF_FFFF) % partitions


# --- the topic directory: what a publish needs, cached briefly ---------------------------------


@dataclass(frozen=True, slots=True)
class TopicRoute:
    """A topic as publishing sees it, with its organisation's limits."""

    target: TopicTarget
    partitions: int
    exactly_once: bool
    limits: Limits
    tier: str
    on_enqueue: EnqueueHook | None = None  # the topic's hook, compiled (most topics have none)


class TopicDirectory:
    """Per-process cache of topic routes; a deleted topic is still refused at commit time.

    A route is used for at most ``ttl_s`` after its load started. Concurrent publishes to a topic
    that is not cached share one load of its route; a route past half its time is reloaded in
    the background while publishes go on using it, so a topic with steady traffic never has a
    publish wait for its route (a load is three queries, and while it ran every publish to the
    topic used to wait for it).
    """

    def __init__(
        self,
        pool: AsyncPool,
        ttl_s: float = ROUTE_TTL_S,
        hook_errors: HookErrors | None = None,
    ) -> None:
        self._pool = pool
        self._ttl_s = ttl_s
        self.hook_errors = hook_errors or HookErrors()
        self._hooks = HookCache()
        self._routes: dict[tuple[str, str], tuple[float, TopicRoute]] = {}
        self._loading: dict[tuple[str, str], asyncio.Future[TopicRoute]] = {}

    async def get(self, organisation_id: str, environment_id: str, name: str) -> TopicRoute:
        """The route of an active topic, or :class:`TopicNotFound`."""
        where = (environment_id, name)
        cached = self._routes.get(where)
        if cached is not None:
            expires, route = cached
            remaining = expires - time.monotonic()
            if remaining > 0:
                if remaining < self._ttl_s / 2 and where not in self._loading:
                    self._load_soon(where, organisation_id)
                return route
        loading = self._loading.get(where) or self._load_soon(where, organisation_id)
        # Shielded: a publish that gives up does not cancel the load the others wait for.
        return await asyncio.shield(loading)

    def _load_soon(
        self, where: tuple[str, str], organisation_id: str
    ) -> asyncio.Future[TopicRoute]:
        environment_id, name = where
        loading = asyncio.ensure_future(self._load(organisation_id, environment_id, name))
        self._loading[where] = loading
        loading.add_done_callback(functools.partial(self._loaded, where, time.monotonic()))
        return loading

    def _loaded(self, where: tuple[str, str], now: float, done: asyncio.Future[TopicRoute]) -> None:
        if self._loading.get(where) is not done:
            return  # forgotten while loading: the answer may be stale, do not cache it
        del self._loading[where]
        if done.cancelled():
            return
        if isinstance(done.exception(), TopicNotFound):
            self._routes.pop(where, None)  # deleted: the next publish is refused at once
        if done.exception() is not None:
            return
        if len(self._routes) >= MAX_CACHED_ROUTES:
            self._routes.clear()
        self._routes[where] = (now + self._ttl_s, done.result())

    def forget(self, environment_id: str, name: str) -> None:
        """Drop a route this process changed or found stale."""
        self._routes.pop((environment_id, name), None)
        self._loading.pop((environment_id, name), None)

    async def _load(self, organisation_id: str, environment_id: str, name: str) -> TopicRoute:
        async with self._pool.connection() as conn:
            topic = await topic_service.get_topic(conn, environment_id, name)
            organisation = await tenants.get_organisation(conn, organisation_id)
            project = await (
                await conn.execute(q.PROJECT_OF_ENVIRONMENT, {"environment_id": environment_id})
            ).fetchone()
            hook = await (
                await conn.execute(hq.SELECT_TOPIC_HOOK, {"topic_id": topic.id})
            ).fetchone()
        target = TopicTarget(
            topic.id,
            topic.name,
            topic.latency_class,
            topic.retention_s,
            organisation_id,
            project["project_id"] if project else "",
            environment_id,
            tier_weight(organisation.limits.publish_per_s),
        )
        return TopicRoute(
            target,
            topic.partitions,
            topic.delivery == "exactly-once",
            organisation.limits,
            organisation.tier,
            None if hook is None else self._enqueue_hook(topic.id, topic.name, hook["on_enqueue"]),
        )

    def _enqueue_hook(self, topic_id: str, topic: str, source: str) -> EnqueueHook | None:
        """The topic's hook compiled; one that no longer compiles (it did when saved, so only a
        newer sandbox refuses it) is counted as failing and left out."""
        try:
            hook = self._hooks.get(source, ON_ENQUEUE, "onEnqueue")
        except InvalidHook as exc:
            self.hook_errors.failed("onEnqueue", topic_id, exc.message, topic=topic)
            return None
        return EnqueueHook(topic_id, topic, hook, self.hook_errors)


# --- the publish service ------------------------------------------------------------------------


class Published(NamedTuple):
    """A message stored durably."""

    message_id: str
    partition: int
    offset: int
    timestamp_ms: int


class PublishService:
    """Validates publishes against the tier, partitions them and waits for their commit."""

    def __init__(
        self,
        pool: AsyncPool,
        writer: SegmentWriter,
        usage: UsageSink | None = None,
        hook_errors: HookErrors | None = None,
    ) -> None:
        self.pool = pool
        self.writer = writer
        self.usage = usage
        self.accounting = Accounting(usage)  # every counter of a publish, from one record
        self.topics = TopicDirectory(pool, hook_errors=hook_errors)
        self._salts: dict[str, int] = {}  # per topic: where this process's rotation starts
        self._inflight: dict[tuple[str, str], asyncio.Future[Placement]] = {}

    async def publish(
        self,
        organisation_id: str,
        environment_id: str,
        topic: str,
        requests: list[PublishRequest],
        *,
        batch: bool = False,
        producer: Producer | None = None,
    ) -> list[Published]:
        """Store ``requests`` atomically; their ids and offsets in request order."""
        route = await self.topics.get(organisation_id, environment_id, topic)
        try:
            return await self._publish(environment_id, route, requests, batch, producer)
        except TopicNotFound:
            # The cached route may name a topic deleted (and perhaps re-created) meanwhile.
            self.topics.forget(environment_id, topic)
            route = await self.topics.get(organisation_id, environment_id, topic)
            return await self._publish(environment_id, route, requests, batch, producer)

    async def _publish(
        self,
        environment_id: str,
        route: TopicRoute,
        requests: list[PublishRequest],
        batch: bool,
        producer: Producer | None,
    ) -> list[Published]:
        if batch:
            _check_batch_size(len(requests), route)
        entries, size_bytes = self._entries(route, requests, batch)
        placements = await self._write(route, entries, size_bytes)
        target = route.target
        self.accounting.record(
            PublishRecord(
                target.organisation_id,
                environment_id,
                target.name,
                route.exactly_once,
                target.latency_class,
                len(placements),
                size_bytes,
                placements,
                producer,
            )
        )
        topic_id = route.target.id
        return [
            Published(
                message_id(topic_id, p.partition, p.offset), p.partition, p.offset, p.timestamp_ms
            )
            for p in placements
        ]

    def _entries(
        self, route: TopicRoute, requests: list[PublishRequest], batch: bool
    ) -> tuple[list[Entry], int]:
        """Messages with their partitions, and their total size for the writer's flush cap."""
        now_ms = time.time_ns() // 1_000_000
        keyless_partition: int | None = None
        limit = route.limits.max_message_bytes
        encode = msgspec.json.encode
        entries = []
        total = 0
        plain = route.on_enqueue is None
        for index, request in enumerate(requests):
            if (  # the common case, inlined
                request.key is None
                and not request.headers
                and plain
                and request.fairness_key is None
                and request.throttle_keys is None
            ):
                data = request.data  # a REST publish's JSON as sent, or a decoded value
                value = bytes(data) if type(data) is Raw else encode(data)
                size = len(value)
                if size > limit:
                    raise MessageTooLarge(index if batch else None, size, limit, route.tier)
                message = Message(None, {}, value, now_ms)
            else:
                message, size = _message(request, now_ms, route, index if batch else None)
            total += size + MESSAGE_OVERHEAD_BYTES
            if message.key is not None:
                partition = partition_for_key(message.key, route.partitions)
            else:
                if keyless_partition is None:
                    keyless_partition = self._next_partition(route)
                partition = keyless_partition
            entries.append(Entry(partition, message, request.idempotency_key))
        return entries, total

    def _next_partition(self, route: TopicRoute) -> int:
        """The topic's keyless partition until the writer's next flush starts, then the next."""
        topic_id = route.target.id
        salt = self._salts.get(topic_id)
        if salt is None:
            if len(self._salts) >= MAX_CACHED_ROUTES:
                self._salts.clear()
            salt = self._salts[topic_id] = random.randrange(1 << 16)
        return (self.writer.flushes_started + salt) % route.partitions

    async def _write(
        self, route: TopicRoute, entries: list[Entry], size_bytes: int
    ) -> list[Placement]:
        if all(entry.idempotency_key is None for entry in entries):
            return await self.writer.write(route.target, entries, size_bytes)
        return await _IdempotentWrite(self, self._inflight, route, entries).run()

    async def by_idempotency_key(
        self, organisation_id: str, environment_id: str, topic: str, key: str
    ) -> Published:
        """The message stored with ``key`` on ``topic`` (resolves an unknown publish outcome)."""
        route = await self.topics.get(organisation_id, environment_id, topic)
        topic_id = route.target.id
        found = (await self.committed_keys(topic_id, [key])).get(key)
        if found is None:
            raise IdempotencyKeyNotFound(route.target.name, key)
        return Published(
            message_id(topic_id, found.partition, found.offset),
            found.partition,
            found.offset,
            found.timestamp_ms,
        )

    async def committed_keys(self, topic_id: str, keys: list[str]) -> dict[str, Placement]:
        """Idempotency keys of the topic committed within its retention."""
        async with self.pool.connection() as conn:
            rows = await (
                await conn.execute(q.SELECT_IDEMPOTENCY_KEYS, {"topic_id": topic_id, "keys": keys})
            ).fetchall()
        return {
            row["idempotency_key"]: Placement(
                row["partition"], row["offset"], epoch_ms(row["published_at"])
            )
            for row in rows
        }


class _IdempotentWrite:
    """One request's write when some of its messages carry idempotency keys."""

    def __init__(
        self,
        service: PublishService,
        inflight: dict[tuple[str, str], asyncio.Future[Placement]],
        route: TopicRoute,
        entries: list[Entry],
    ) -> None:
        self.service = service
        self.inflight = inflight
        self.route = route
        self.entries = entries
        self.results: list[Placement | None] = [None] * len(entries)
        self.waits: dict[int, asyncio.Future[Placement]] = {}
        self.aliases: dict[int, int] = {}
        self.owned: dict[
            str, int
        ] = {}  # key -> index of its first entry, which this request writes

    async def run(self) -> list[Placement]:
        keys = sorted({e.idempotency_key for e in self.entries if e.idempotency_key is not None})
        committed = await self.service.committed_keys(self.route.target.id, keys)
        to_write = self._sort(committed)
        try:
            if to_write:
                written = await self.service.writer.write(
                    self.route.target, [self.entries[i] for i in to_write]
                )
                for index, placement in zip(to_write, written, strict=True):
                    self.results[index] = placement
            self._release(None)
        except BaseException as exc:
            self._release(exc)
            raise
        for index, future in self.waits.items():
            self.results[index] = await asyncio.shield(future)
        for index, first in self.aliases.items():
            self.results[index] = self.results[first]
        return [r for r in self.results if r is not None]

    def _sort(self, committed: dict[str, Placement]) -> list[int]:
        """Answer what is known, wait for what is in flight, write the rest."""
        inflight = self.inflight
        topic_id = self.route.target.id
        to_write = []
        for index, entry in enumerate(self.entries):
            key = entry.idempotency_key
            if key is None:
                to_write.append(index)
            elif key in committed:
                self.results[index] = committed[key]
            elif key in self.owned:
                self.aliases[index] = self.owned[key]
            elif (topic_id, key) in inflight:
                self.waits[index] = inflight[(topic_id, key)]
            else:
                self.owned[key] = index
                future: asyncio.Future[Placement] = asyncio.get_running_loop().create_future()
                future.add_done_callback(consume_exception)
                inflight[(topic_id, key)] = future
                to_write.append(index)
        return to_write

    def _release(self, error: BaseException | None) -> None:
        topic_id = self.route.target.id
        for key, index in self.owned.items():
            future = self.inflight.pop((topic_id, key))
            if future.done():
                continue
            result = self.results[index]
            if error is None and result is not None:
                future.set_result(result)
            else:
                exc = error if isinstance(error, Exception) else None
                future.set_exception(
                    exc or PublishUnavailable("the original request was cancelled")
                )


def _message(
    request: PublishRequest, now_ms: int, route: TopicRoute, index: int | None
) -> tuple[Message, int]:
    """The message to store and its size (data, key and headers encoded)."""
    data = request.data
    value = bytes(data) if type(data) is Raw else msgspec.json.encode(data)
    key = None if request.key is None else request.key.encode()
    headers = request.headers or {}
    size = len(value) + len(key or b"")
    if headers:
        size += sum(len(k.encode()) + len(v.encode()) for k, v in headers.items())
    limit = route.limits.max_message_bytes
    if size > limit:
        raise MessageTooLarge(index, size, limit, route.tier)
    return Message(key, headers, value, now_ms, schedule=_schedule(request, route)), size


def _schedule(request: PublishRequest, route: TopicRoute) -> Schedule | None:
    """The message's scheduling metadata: its own fields, then what the topic's hook assigns to
    those it left unset; None when there is nothing to schedule by."""
    fairness_key, throttle_keys, weight = request.fairness_key, request.throttle_keys, 0
    hook = route.on_enqueue
    if hook is not None and (
        assigned := hook.assign(request.key, request.headers or {}, request.data)
    ):
        fairness_key = assigned.fairness_key if fairness_key is None else fairness_key
        if throttle_keys is None and assigned.throttle_keys is not None:
            throttle_keys = list(assigned.throttle_keys)
        weight = assigned.weight
    keys = tuple(dict.fromkeys(throttle_keys or ()))
    if fairness_key is None and not weight and not keys:
        return None
    return Schedule(fairness_key, weight, keys)


def _check_batch_size(count: int, route: TopicRoute) -> None:
    limit = route.limits.max_batch_messages
    if count > limit:
        raise QuotaExceeded(
            "messages", f"a batch of {count} messages", str(limit), count, limit, route.tier
        )
