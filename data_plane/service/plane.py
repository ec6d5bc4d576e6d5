"""The data plane of one process, built in one place, and the one door to it: :class:`DataPlane`.

It owns the group-commit writer, the reader and its block cache (which the writer fills with its
own fresh blocks), the publish listener, the route and group caches, the pulse and the traffic
counters. Every caller (HTTP controllers, dashboard pages, a listener speaking another protocol)
goes through its methods with a :class:`~data_plane.service.scope.Caller`: each method opens its
own connection and transaction, retries what a stale cache got wrong, meters what it delivers
and wakes the consumers its change concerns. Errors are typed (``core.errors``), so each edge
maps them to its protocol in one place.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass

from psycopg_pool import PoolTimeout
from redis.asyncio import Redis

from core.db import AsyncPool, Conn, rearm, remaining_s
from core.object_store import ObjectStore
from core.sealed import Sealer
from core.settings import DataPlaneSettings
from data_plane import delivery
from data_plane.config.service import ConfigCache
from data_plane.delivery import AckOutcome, AckRejected, GroupRef, GroupRefCache, Pulled, stats
from data_plane.delivery.shares import PullShares
from data_plane.delivery.stats import GroupStats
from data_plane.delivery.throttle import Buckets, Throttle
from data_plane.delivery.triage import SlowDeliveryTriage
from data_plane.groups import service as groups
from data_plane.groups.classic import ClassicGroups
from data_plane.groups.pulse import Pulse
from data_plane.hooks import store as hook_store
from data_plane.hooks.errors import HookErrorFlusher, HookErrors
from data_plane.hooks.failure import ON_FAILURE, FailureHook
from data_plane.hooks.sandbox import HookCache, InvalidHook
from data_plane.read import reader as read_path
from data_plane.read import seek
from data_plane.read.cache import BlockCache
from data_plane.read.notify import PublishListener
from data_plane.read.reader import ReadResult, SegmentReader, TopicRef
from data_plane.service.config import RuntimeConfig
from data_plane.service.consuming import Stream, wait_s
from data_plane.service.deadletters import DeadLetters
from data_plane.service.groups import Groups
from data_plane.service.push import Push
from data_plane.service.records import Records
from data_plane.service.scope import Caller, in_group
from data_plane.service.topics import Topics
from data_plane.service.weights import OrgWeights
from data_plane.topics.schemas import PublishRequest
from data_plane.topics.traffic import TrafficCounter, TrafficFlusher
from data_plane.write.accounting import Producer, ProducerSink
from data_plane.write.publish import Published, PublishService, UsageSink
from data_plane.write.segment import Message
from data_plane.write.triage import SlowPublishTriage
from data_plane.write.writer import SegmentWriter

# A nack of a batch: ``(ackId, error, retryDelay)``, the delay as a duration or milliseconds.
NackItem = tuple[str, str, str | int | None]


@dataclass(frozen=True, slots=True)
class NackOutcome:
    """What happened to each message of a batched nack."""

    done: list[dict[str, object]]  # as one nack answers: {ackId, deadLettered, retryInMs}
    rejected: list[dict[str, str]]  # {ackId, reason}


def _delay_ms(value: str | int | None, field: str) -> int | None:
    """A nack's retry delay in milliseconds (None: the group's)."""
    return None if value is None else groups.parse_duration_ms(value, field, groups.RETRY_DELAY_MS)


def message_bytes(messages: Iterable[Message]) -> int:
    """Payload bytes as publishing counts them: data, key, header names and values (UTF-8)."""
    total = 0
    for message in messages:
        total += len(message.value)
        if message.key is not None:
            total += len(message.key)
        headers = message.headers
        if headers:  # UTF-8 length of the joined names and values: one encode each, not per item
            total += len("".join(headers).encode()) + len("".join(headers.values()).encode())
    return total


class DataPlane:
    """Publish, consume, browse and administer topics, groups and dead letters; one per process.

    ``topics``, ``groups`` and ``dead_letters`` hold the administration; the hot paths (publish,
    pull, stream, ack) are methods of their own, with nothing between the caller and the writer
    or the pull but the call.
    """

    def __init__(
        self,
        db: AsyncPool,
        objects: ObjectStore,
        config: DataPlaneSettings,
        usage: UsageSink | None = None,
        redis: Redis | None = None,
    ) -> None:
        self.db = db
        self.objects = objects
        self.usage = usage
        self.cache = BlockCache(config.read_cache_max_bytes)
        publish_triage = SlowPublishTriage.from_settings(config.triage, config.greptime)
        self.writer = SegmentWriter(
            db,
            objects,
            config.writer,
            triage=publish_triage,
            timings_log_s=config.triage.timings_log_s,
        )
        self.writer.subscribe(self.cache.put_committed)
        self.reader = SegmentReader(objects, self.cache)
        self.listener = PublishListener(config.database_url)
        # Failures of Lua hooks, counted here and added to their rows every second.
        self.hook_errors = HookErrors()
        self.hook_error_flusher = HookErrorFlusher(self.hook_errors, db.connection)
        self._hooks = HookCache()  # groups' onFailure hooks, compiled
        self._member_streams: dict[tuple[str, str], Stream] = {}  # (group id, member): newest
        self.publisher = PublishService(db, self.writer, usage, self.hook_errors)
        self.group_refs = GroupRefCache()
        self.pulse = Pulse(db)  # a stall in it spares silent members (groups.pulse)
        self.traffic = TrafficCounter()  # per-topic rates for the dashboard (topics.traffic)
        self.writer.subscribe(self.traffic.committed)
        self.traffic_flusher = TrafficFlusher(self.traffic, db.connection, config.traffic_flush_s)
        # None: off, nothing paid
        self.delivery_triage = SlowDeliveryTriage.from_settings(config.triage, config.greptime)
        # Set when the server stops taking requests (the end of a SIGTERM drain): long-polls and
        # streams waiting for messages answer at once (streams end with a reconnect hint).
        self.stopping = asyncio.Event()
        self.topics = Topics(db, self.publisher.topics)
        sealer = Sealer(config.push.secrets_key)
        allow_private = config.webhooks.allow_private
        self.groups = Groups(db, self.group_refs, sealer, allow_private)
        self.dead_letters = DeadLetters(db, config.webhooks)
        # For the Kafka protocol listener: records by offset, and Kafka's classic groups.
        self.records = Records(
            db, self.publisher, self.reader, self.traffic, self.delivered, message_bytes
        )
        self.classic_groups = ClassicGroups(db)
        # Push groups: their console side, and what the pushers do beside pulls and acks.
        self.push = Push(db, self.reader, self.listener, sealer, allow_private, self._failure_hook)
        # Fair scheduling: runtime configuration (throttle rates), the throttle buckets (Redis,
        # else this process's memory).
        self.config_cache = ConfigCache(db)
        self.buckets = Buckets(redis)
        self.config = RuntimeConfig(db, self.config_cache)
        # Lease statements in flight, shared between organisations by their tiers' weights.
        self.org_weights = OrgWeights(db)
        self.pull_shares = PullShares(
            config.pulls_in_flight, weight_of=self.org_weights, patience_s=self._pull_patience_s
        )

    async def start(self) -> None:
        """Start the writer's flush loop, the LISTEN connection, the pulse and the traffic flusher."""
        await self.writer.start()
        self.listener.start()
        self.pulse.start()
        self.traffic_flusher.start()
        self.hook_error_flusher.start()

    async def close(self) -> None:
        """Flush and stop the writer, stop listening and beating, write the last traffic counts."""
        await self.writer.close()
        await self.listener.stop()
        await self.pulse.stop()
        await self.traffic_flusher.stop()
        await self.hook_error_flusher.stop()
        await self.org_weights.close()

    def stop_waiting(self) -> None:
        """Set :attr:`stopping` and wake every waiting long-poll and stream to answer now."""
        self.stopping.set()
        self.listener.wake_all()

    # --- publishing ----------------------------------------------------------------------------

    def publish(
        self,
        caller: Caller,
        topic: str,
        messages: list[PublishRequest],
        *,
        batch: bool = False,
    ) -> Awaitable[list[Published]]:
        """Store messages atomically (all get offsets in one commit, or none do); answered once
        they are in a segment object and committed. Their ids and places, in order."""
        return self.publisher.publish(
            caller.organisation_id,
            caller.environment_id,
            topic,
            messages,
            batch=batch,
            producer=Producer.of(caller),
        )

    def count_producers(self, sink: ProducerSink) -> None:
        """Feed the producer series from every publish's accounting record from now on."""
        self.publisher.accounting.producers = sink

    def find_published(
        self, caller: Caller, topic: str, idempotency_key: str
    ) -> Awaitable[Published]:
        """The message published on ``topic`` with ``idempotency_key`` (within its retention),
        or 404 ``IDEMPOTENCY_KEY_NOT_FOUND``: resolves a publish whose outcome was unknown."""
        return self.publisher.by_idempotency_key(
            caller.organisation_id, caller.environment_id, topic, idempotency_key
        )

    # --- consuming -----------------------------------------------------------------------------

    async def pull(
        self,
        caller: Caller,
        topic: str,
        group: str,
        member_id: str,
        max_messages: int,
        wait_ms: int = 0,
        window: int | None = None,
    ) -> Pulled:
        """Lease up to ``max_messages`` to a member, waiting up to ``wait_ms`` for at least one
        (less when the server stops): no polling, a notification wakes it. ``window``, when
        given, first becomes the member's own window (it never holds more leased)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000
        environment_id = caller.environment_id
        ref = await self._group_ref(environment_id, topic, group)
        if window is not None:
            ref = await self._set_window(environment_id, ref, member_id, window)
        pulled: Pulled | None = None
        # Registered before each pull, so a publish while it runs is not missed.
        with self.listener.watch(ref.topic_id) as watch:
            while True:
                watch.event.clear()
                rearm()  # each pull gets the request's whole time for PostgreSQL
                pulled = await self._pull(caller, ref, member_id, max_messages, pulled)
                ref, watch.partitions, watch.full = pulled.ref, pulled.partitions, pulled.full
                remaining = deadline - loop.time()
                if pulled.deliveries or remaining <= 0 or self.stopping.is_set():
                    return pulled
                await watch.wait(wait_s(pulled, remaining))  # the server stopping wakes it too

    async def stream(
        self,
        caller: Caller,
        topic: str,
        group: str,
        member_id: str,
        batch: int,
        window: int | None = None,
    ) -> Stream:
        """A member's deliveries as they become available, up to ``batch`` per pull; the first
        pull is made here, so a missing group or member fails before the stream starts. It never
        holds more messages leased to the member than the member's window (``window``, when
        given, becomes it first)."""
        environment_id = caller.environment_id
        ref = await self._group_ref(environment_id, topic, group)
        if window is not None:
            ref = await self._set_window(environment_id, ref, member_id, window)
        first = await self._pull(caller, ref, member_id, batch)

        def pull_again(previous: Pulled) -> Awaitable[Pulled]:
            rearm()  # each pull of a stream gets the request's whole time for PostgreSQL
            return self._pull(caller, previous.ref, member_id, batch, previous)

        stream = Stream(
            first, pull_again, self.listener, self.stopping.is_set, batch, member_id, self._ended
        )
        key = (ref.id, member_id)
        if (older := self._member_streams.get(key)) is not None:
            older.replace()  # one stream per member in a process: the newest serves it
        self._member_streams[key] = stream
        return stream

    def _ended(self, stream: Stream) -> None:
        """Forget a stream that ended (a newer one of its member stays registered)."""
        key = (stream.first.ref.id, stream.member_id)
        if self._member_streams.get(key) is stream:
            del self._member_streams[key]

    async def ack(self, caller: Caller, topic: str, group: str, ack_ids: list[str]) -> AckOutcome:
        """Settle leases as done: each id acked or rejected with its reason; 409
        ``ACK_REJECTED`` (the verdicts in its body) when none could be acked."""
        environment_id = caller.environment_id
        ref = await self._group_ref(environment_id, topic, group)
        async with self.db.connection() as conn:
            outcome = await delivery.ack(conn, ref, ack_ids)
            if not outcome.done and (moved := await self._moved(conn, environment_id, ref)):
                outcome = await delivery.ack(conn, moved, ack_ids)
        if not outcome.done:
            verdicts = {"acked": [], "rejected": outcome.rejected}  # beside "error", as in a 200
            raise AckRejected(outcome.rejected[0]["reason"], body=verdicts)
        self.listener.poke_full(ref.topic_id)  # a stream waiting for room pulls again
        return outcome

    async def nack(
        self,
        caller: Caller,
        topic: str,
        group: str,
        ack_id: str,
        error: str = "",
        retry_delay: str | int | None = None,
    ) -> dict[str, object]:
        """The message failed: retried after ``retryDelay · 2^(attempt-1)`` (the group's delay
        unless given), or dead-lettered after ``maxRetries``."""
        delay_ms = _delay_ms(retry_delay, "retryDelay")
        async with in_group(self.db, caller, topic, group) as (conn, ref):
            hook = self._failure_hook(ref)
            nacked = await delivery.nack(
                conn, self.reader, ref, ack_id, error, delay_ms, on_failure=hook
            )
        # Its streams pull again: room was made, and the retry's due time is a new wake-up.
        self.listener.poke({ref.topic_id})
        return nacked

    async def nack_many(
        self, caller: Caller, topic: str, group: str, nacks: Sequence[NackItem]
    ) -> NackOutcome:
        """Nack each ``(ackId, error, retryDelay)`` as :meth:`nack` does, each on its own (a
        refused id leaves the others nacked): the nacked and the refused with their reasons;
        409 ``ACK_REJECTED`` (both lists in its body) when none could be nacked."""
        items = [
            (ack_id, error, _delay_ms(delay, f"nacks[{i}].retryDelay"))
            for i, (ack_id, error, delay) in enumerate(nacks)
        ]
        async with in_group(self.db, caller, topic, group) as (conn, ref):
            hook = self._failure_hook(ref)
            done, rejected = await delivery.nack_many(conn, self.reader, ref, items, hook)
        if not done:
            raise AckRejected(rejected[0]["reason"], body={"nacked": [], "rejected": rejected})
        self.listener.poke({ref.topic_id})  # as after one nack
        return NackOutcome(done, rejected)

    async def extend(
        self, caller: Caller, topic: str, group: str, ack_ids: list[str], seconds: int
    ) -> list[str]:
        """Push the end of current, unexpired leases ``seconds`` from now; the ids extended."""
        async with in_group(self.db, caller, topic, group) as (conn, ref):
            return await delivery.extend(conn, ref, ack_ids, seconds)

    async def group_stats(self, caller: Caller, topic: str, group: str) -> GroupStats:
        """Depth, in flight, consumers; a fair group's fairness keys (pending, deficit, weight);
        the environment's throttle keys (tokens, rate, burst); its hooks' failures."""
        environment_id = caller.environment_id
        async with in_group(self.db, caller, topic, group) as (conn, ref):
            limits = await self.config_cache.throttles(environment_id)
            tokens = (await self.buckets.take(environment_id, limits, [])).tokens if limits else {}
            errors = await hook_store.hook_errors(conn, ref.topic_id, ref.id)
            errors += self.hook_errors.unflushed(ref.topic_id, ref.id)
            return await stats.group_stats(conn, self.reader, ref, tokens, limits, errors)

    # --- reading without a group ---------------------------------------------------------------

    async def browse(
        self, caller: Caller, topic: str, partition: int, offset: int | None, limit: int
    ) -> tuple[TopicRef, ReadResult]:
        """A page of one partition's messages from ``offset`` (the earliest retained when
        None), metered as a delivery."""
        environment_id = caller.environment_id
        async with self.db.connection() as conn:
            ref, result = await read_path.browse(
                conn, self.reader, environment_id, topic, partition, offset, limit
            )
        self.delivered(environment_id, [m.message for m in result.messages])
        return ref, result

    async def offset_at(self, caller: Caller, topic: str, partition: int, timestamp_ms: int) -> int:
        """The first retained offset of a partition published at or after ``timestamp_ms``
        (the partition's end when there is none)."""
        async with self.db.connection() as conn:
            found = await seek.seek_topic(
                conn, self.reader, caller.environment_id, topic, partition, timestamp_ms
            )
        return found.offset

    # --- what the methods above share ----------------------------------------------------------

    def delivered(self, environment_id: str, messages: list[Message]) -> None:
        """Count messages sent to a caller (egress) in its environment's usage."""
        if messages and self.usage is not None:
            self.usage.delivered(environment_id, len(messages), message_bytes(messages))

    def _failure_hook(self, ref: GroupRef) -> FailureHook | None:
        """The group's ``onFailure`` hook compiled (cached), if it has one; one that no longer
        compiles counts as failing, and the group's policy decides."""
        if ref.on_failure is None:
            return None
        try:
            hook = self._hooks.get(ref.on_failure, ON_FAILURE, "onFailure")
        except InvalidHook as exc:
            self.hook_errors.failed("onFailure", ref.id, exc.message)
            return None
        return FailureHook(ref.id, ref.topic, ref.name, hook, self.hook_errors)

    async def _throttle(self, environment_id: str) -> Throttle:
        """A fair pull's throttle: the environment's throttle keys and the shared buckets."""
        limits = await self.config_cache.throttles(environment_id)
        return Throttle(self.buckets, environment_id, limits)

    def _pull_patience_s(self) -> float:
        """How long a pull may wait for its share: as long as for a pooled connection."""
        left = remaining_s()
        return self.db.timeout if left is None else min(self.db.timeout, left)

    async def _group_ref(self, environment_id: str, topic: str, group: str) -> GroupRef:
        """The group, from the process's cache when it is there."""
        ref = self.group_refs.cached(environment_id, topic, group)
        if ref is None:
            async with self.db.connection() as conn:
                ref = await self.group_refs.get(conn, environment_id, topic, group)
        return ref

    async def _moved(self, conn: Conn, environment_id: str, ref: GroupRef) -> GroupRef | None:
        """After a cached ref found its member, group or leases gone: the group looked up
        again, if it is another one now (re-created); None when it is the same (404 if gone)."""
        self.group_refs.forget(environment_id, ref.topic, ref.name)
        fresh = await self.group_refs.get(conn, environment_id, ref.topic, ref.name)
        return fresh if fresh.id != ref.id else None

    async def _set_window(
        self, environment_id: str, ref: GroupRef, member_id: str, window: int
    ) -> GroupRef:
        """Set the member's own window; the group looked up again when the cached one lost
        the member (re-created), as a pull does."""
        async with self.db.connection() as conn:
            try:
                await groups.member_window(conn, ref.id, member_id, window)
            except groups.MemberNotFound:
                moved = await self._moved(conn, environment_id, ref)
                if moved is None:
                    raise
                await groups.member_window(conn, moved.id, member_id, window)
                return moved
        return ref

    async def _pull(
        self,
        caller: Caller,
        ref: GroupRef,
        member_id: str,
        limit: int,
        previous: Pulled | None = None,
    ) -> Pulled:
        """One pull, metered; ``previous``, the member's last pull in this request, says what
        it owned. It runs in one of the caller's organisation's shares of the pulls in flight."""
        environment_id, organisation_id = caller.environment_id, caller.organisation_id
        owned = None if previous is None else len(previous.partitions)
        started_s = time.perf_counter()
        try:  # the wait for a slot counts as the wait for a connection
            await self.pull_shares.acquire(organisation_id)
        except TimeoutError:
            raise PoolTimeout("no connection for a pull in time") from None
        try:
            async with self.db.connection() as conn:
                acquire_s = time.perf_counter() - started_s
                throttle = functools.partial(self._throttle, environment_id)
                try:
                    pulled = await delivery.pull(
                        conn, self.reader, ref, member_id, limit, owned, throttle=throttle
                    )
                except (groups.MemberNotFound, groups.GroupTopicNotFound):
                    moved = await self._moved(conn, environment_id, ref)
                    if moved is None:
                        raise
                    pulled = await delivery.pull(
                        conn, self.reader, moved, member_id, limit, throttle=throttle
                    )
        finally:
            self.pull_shares.release(organisation_id)
        if self.delivery_triage is not None:
            now_s = time.perf_counter()
            self.delivery_triage.observe_pull(
                environment_id, ref, member_id, pulled, acquire_s, now_s - started_s, now_s
            )
        self.delivered(environment_id, [item.message for item in pulled.deliveries])
        self.traffic.consumed(pulled.ref.topic_id, len(pulled.deliveries))
        return pulled
