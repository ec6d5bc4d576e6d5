"""The data plane of one process, built in one place: its composition root.

:class:`DataPlane` owns the group-commit writer, the reader and its block cache (which the
writer fills with its own fresh blocks), the publish listener, the publish service and the
group cache. The API builds one per process and starts and closes it in its lifespan; handlers
receive it by dependency injection. Deliveries are metered here, where they happen, as the
publish service meters publishes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from core import settings
from core.db import AsyncPool, Conn
from core.object_store import ObjectStore
from core.settings import WriterSettings
from core.worker import send_task
from data_plane import delivery
from data_plane.delivery import GroupRef, GroupRefCache, Pulled
from data_plane.delivery.triage import SlowDeliveryTriage
from data_plane.groups import service as groups
from data_plane.groups.pulse import Pulse
from data_plane.groups.service import GroupConfig, GroupTopicNotFound, MemberNotFound
from data_plane.read import reader as read_path
from data_plane.read.cache import BlockCache
from data_plane.read.notify import PublishListener
from data_plane.read.reader import ReadResult, SegmentReader, TopicRef
from data_plane.topics import service as topics
from data_plane.topics.service import Topic
from data_plane.topics.traffic import TrafficCounter, TrafficFlusher
from data_plane.write.publish import PublishService, UsageSink
from data_plane.write.segment import Message
from data_plane.write.triage import SlowPublishTriage
from data_plane.write.writer import SegmentWriter
from observability.logging import get_logger
from tenants.team import audit
from tenants.team.audit import Actor

log = get_logger("queuecore.data_plane")


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
    """Writer, reader, cache, listener, publish service and group cache of one process."""

    def __init__(
        self,
        db: AsyncPool,
        objects: ObjectStore,
        database_url: str,
        usage: UsageSink | None = None,
        writer_config: WriterSettings | None = None,
        cache_max_bytes: int | None = None,
    ) -> None:
        self.db = db
        self.objects = objects
        self.usage = usage
        size = settings.read_cache_max_bytes() if cache_max_bytes is None else cache_max_bytes
        self.cache = BlockCache(size)
        self.writer = SegmentWriter(
            db,
            objects,
            writer_config or settings.writer(),
            triage=SlowPublishTriage.from_settings(),
            timings_log_s=settings.triage().timings_log_s,
        )
        self.writer.subscribe(self.cache.put_committed)
        self.reader = SegmentReader(objects, self.cache)
        self.listener = PublishListener(database_url)
        self.publisher = PublishService(db, self.writer, usage)
        self.group_refs = GroupRefCache()
        self.pulse = Pulse(db)  # a stall in it spares silent members (groups.pulse)
        self.traffic = TrafficCounter()  # per-topic rates for the dashboard (topics.traffic)
        self.delivery_triage = SlowDeliveryTriage.from_settings()  # None: off, nothing paid
        self.writer.subscribe(self.traffic.committed)
        self.traffic_flusher = TrafficFlusher(self.traffic, db.connection, settings.meter().flush_s)
        # Set when the server stops taking requests (the end of a SIGTERM drain): long-polls and
        # streams waiting for messages answer at once (streams end with a reconnect hint).
        self.stopping = asyncio.Event()

    async def start(self) -> None:
        """Start the writer's flush loop, the LISTEN connection, the pulse and the traffic flusher."""
        await self.writer.start()
        self.listener.start()
        self.pulse.start()
        self.traffic_flusher.start()

    async def close(self) -> None:
        """Flush and stop the writer, stop listening and beating, write the last traffic counts."""
        await self.writer.close()
        await self.listener.stop()
        await self.pulse.stop()
        await self.traffic_flusher.stop()

    def stop_waiting(self) -> None:
        """Set :attr:`stopping` and wake every waiting long-poll and stream to answer now."""
        self.stopping.set()
        self.listener.wake_all()

    def delivered(self, environment_id: str, messages: list[Message]) -> None:
        """Count messages sent to a caller (egress) in its environment's usage."""
        if messages and self.usage is not None:
            self.usage.delivered(environment_id, len(messages), message_bytes(messages))

    async def group_ref(self, environment_id: str, topic: str, group: str) -> GroupRef:
        """The group, from the process's cache when it is there."""
        ref = self.group_refs.cached(environment_id, topic, group)
        if ref is None:
            async with self.db.connection() as conn:
                ref = await self.group_refs.get(conn, environment_id, topic, group)
        return ref

    async def fresh_ref(self, conn: Conn, environment_id: str, ref: GroupRef) -> GroupRef:
        """After a cached ref found its member or leases gone: look again (404 if the group is)."""
        self.group_refs.forget(environment_id, ref.topic, ref.name)
        return await self.group_refs.get(conn, environment_id, ref.topic, ref.name)

    async def pull(
        self,
        environment_id: str,
        ref: GroupRef,
        member_id: str,
        limit: int,
        previous: Pulled | None = None,
    ) -> Pulled:
        """One pull, metered; ``previous``, the member's last pull in this request, says what
        it owned."""
        owned = None if previous is None else len(previous.partitions)
        started_s = time.perf_counter()
        async with self.db.connection() as conn:
            acquire_s = time.perf_counter() - started_s
            try:
                pulled = await delivery.pull(conn, self.reader, ref, member_id, limit, owned)
            except (MemberNotFound, GroupTopicNotFound):
                fresh = await self.fresh_ref(conn, environment_id, ref)
                if fresh.id == ref.id:
                    raise
                pulled = await delivery.pull(conn, self.reader, fresh, member_id, limit)
        if self.delivery_triage is not None:
            now_s = time.perf_counter()
            self.delivery_triage.observe_pull(
                environment_id, ref, member_id, pulled, acquire_s, now_s - started_s, now_s
            )
        self.delivered(environment_id, [item.message for item in pulled.deliveries])
        self.traffic.consumed(pulled.ref.topic_id, len(pulled.deliveries))
        return pulled

    async def browse(
        self, environment_id: str, topic: str, partition: int, offset: int | None, limit: int
    ) -> tuple[TopicRef, ReadResult]:
        """A page of one partition's messages, without a consumer group, metered."""
        async with self.db.connection() as conn:
            ref, result = await read_path.browse(
                conn, self.reader, environment_id, topic, partition, offset, limit
            )
        self.delivered(environment_id, [m.message for m in result.messages])
        return ref, result

    # --- topic and group administration: one transaction each, recorded in the audit log ----

    async def create_topic(
        self, organisation_id: str, environment_id: str, name: str, actor: Actor, **options: Any
    ) -> Topic:
        """A new topic (``options``: partitions, retention, delivery, latency_class)."""
        async with self.db.connection() as conn:
            topic = await topics.create_topic(
                conn, organisation_id, environment_id, name, **options
            )
            await audit.record(
                conn,
                organisation_id,
                actor,
                "topic.created",
                _where(environment_id, name),
                partitions=topic.partitions,
                retention=topic.retention,
                delivery=topic.delivery,
                latency_class=topic.latency_class,
            )
        return topic

    async def update_topic(
        self, organisation_id: str, environment_id: str, name: str, actor: Actor, **changes: Any
    ) -> Topic:
        """Partitions up, retention, latency class (``changes``); this process's route to the
        topic is reloaded on its next publish."""
        async with self.db.connection() as conn:
            before = await topics.get_topic(conn, environment_id, name)
            topic = await topics.update_topic(
                conn, organisation_id, environment_id, name, **changes
            )
            await audit.record(
                conn,
                organisation_id,
                actor,
                "topic.updated",
                _where(environment_id, name),
                **_changed(before, topic),
            )
        self.publisher.topics.forget(environment_id, name)
        return topic

    async def delete_topic(
        self, organisation_id: str, environment_id: str, name: str, actor: Actor
    ) -> Topic:
        """Free the name at once; the data goes in the background (:meth:`request_cleanup`)."""
        async with self.db.connection() as conn:
            topic = await topics.delete_topic(conn, environment_id, name)
            await audit.record(
                conn, organisation_id, actor, "topic.deleted", _where(environment_id, name)
            )
        self.publisher.topics.forget(environment_id, name)
        return topic

    async def request_cleanup(self, topic_id: str) -> None:
        """Ask a worker to remove a deleted topic's data now (the periodic sweep is the
        backstop, so a broker that cannot be reached is only logged)."""

        def send() -> None:
            send_task("data_plane.delete_topic_data", kwargs={"topic_id": topic_id})

        try:
            await asyncio.to_thread(send)
        except Exception as exc:
            log.warning("topic_cleanup_not_queued", topic_id=topic_id, error=type(exc).__name__)

    async def configure_group(
        self,
        organisation_id: str,
        environment_id: str,
        topic: str,
        group: str,
        config: GroupConfig,
        actor: Actor,
    ) -> dict[str, Any]:
        """Create or reconfigure a consumer group; returns its described state."""
        async with self.db.connection() as conn:
            state = await groups.configure(conn, environment_id, topic, group, config)
            await audit.record(
                conn,
                organisation_id,
                actor,
                "group.configured",
                _where(environment_id, topic, group),
                **asdict(config),
            )
        self.group_refs.forget(environment_id, topic, group)
        return state


def _where(environment_id: str, *names: str) -> str:
    """An audit target: ``topic`` or ``topic/group`` in an environment."""
    return f"{'/'.join(names)} ({environment_id})"


def _changed(before: Topic, after: Topic) -> dict[str, Any]:
    """What an update changed, as ``{field: "old → new"}``."""
    fields = ("partitions", "retention", "latency_class")
    return {
        field: f"{getattr(before, field)} → {getattr(after, field)}"
        for field in fields
        if getattr(before, field) != getattr(after, field)
    }
