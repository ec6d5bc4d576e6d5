"""Topic administration through the door: create, list, describe, update, delete (each change
recorded in the organisation's audit log, in its own transaction), and the dashboard's read
models of topics (depths, partitions, groups, traffic)."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
import msgspec

from core.db import AsyncPool
from core.worker import send_task
from data_plane.groups import service as groups
from data_plane.hooks import store as hooks
from data_plane.service.scope import Caller, audit_target
from data_plane.service.views import topic_view
from data_plane.topics import overview, traffic
from data_plane.topics import service as topics
from data_plane.topics.overview import TopicDetail, TopicSummary
from data_plane.topics.schemas import TopicList, TopicStats, TopicView
from data_plane.topics.traffic import TrafficSeries, TrafficWindow
from data_plane.write.publish import TopicDirectory
from observability.logging import get_logger
from tenants.team import audit
from tenants.team.audit import Actor

DELETE_TOPIC_DATA = "data_plane.delete_topic_data"
log = get_logger("queuecore.topics")


class Topics:
    """The topics of the caller's environment; a change is seen by this process's publishes at
    once (its cached route is dropped), by other replicas' within their route's lifetime."""

    def __init__(self, db: AsyncPool, routes: TopicDirectory) -> None:
        self._db = db
        self._routes = routes

    async def create(
        self,
        caller: Caller,
        name: str,
        actor: Actor,
        *,
        partitions: int = 3,
        retention: str = "7d",
        delivery: str = "exactly-once",
        latency_class: str = "express",
        on_enqueue: str | None = None,
    ) -> TopicView:
        """A new topic with its partitions, within the tier's quotas (409 when the name is taken);
        ``on_enqueue`` is its Lua hook (422 ``INVALID_HOOK`` unless it compiles)."""
        hooks.check_on_enqueue(on_enqueue)
        async with self._db.connection() as conn:
            topic = await topics.create_topic(
                conn,
                caller.organisation_id,
                caller.environment_id,
                name,
                partitions=partitions,
                retention=retention,
                delivery=delivery,
                latency_class=latency_class,
            )
            await audit.record(
                conn,
                caller.organisation_id,
                actor,
                "topic.created",
                audit_target(caller.environment_id, name),
                partitions=topic.partitions,
                retention=topic.retention,
                delivery=topic.delivery,
                latency_class=topic.latency_class,
                on_enqueue=on_enqueue is not None,
            )
            if on_enqueue is not None:
                await hooks.set_on_enqueue(conn, topic.id, on_enqueue)
        return topic_view(topic, on_enqueue)

    async def list_all(self, caller: Caller) -> TopicList:
        """The environment's active topics, by name."""
        async with self._db.connection() as conn:
            found = await topics.list_topics(conn, caller.environment_id)
        return TopicList(topics=[topic_view(topic) for topic in found])

    async def describe(self, caller: Caller, name: str) -> TopicView:
        """One topic with its depth, messages in flight and consumers."""
        async with self._db.connection() as conn:
            topic = await topics.get_topic(conn, caller.environment_id, name)
            stats = await groups.topic_stats(conn, topic.id)
            source = await hooks.on_enqueue(conn, topic.id)
        view = topic_view(topic, source)
        view.stats = TopicStats(**stats)
        return view

    async def update(
        self,
        caller: Caller,
        name: str,
        actor: Actor,
        *,
        partitions: int | None = None,
        retention: str | None = None,
        latency_class: str | None = None,
        on_enqueue: str | msgspec.UnsetType | None = msgspec.UNSET,
    ) -> TopicView:
        """More partitions (never fewer), another retention or latency class, another
        ``onEnqueue`` hook (None removes it; 422 ``INVALID_HOOK`` unless it compiles)."""
        if isinstance(on_enqueue, str):
            hooks.check_on_enqueue(on_enqueue)
        async with self._db.connection() as conn:
            before = await topics.get_topic(conn, caller.environment_id, name)
            topic = await topics.update_topic(
                conn,
                caller.organisation_id,
                caller.environment_id,
                name,
                partitions=partitions,
                retention=retention,
                latency_class=latency_class,
            )
            changed = _changed(topic_view(before), topic_view(topic))
            if on_enqueue is not msgspec.UNSET:
                await hooks.set_on_enqueue(conn, topic.id, on_enqueue)
                changed["on_enqueue"] = "set" if on_enqueue is not None else "removed"
            source = await hooks.on_enqueue(conn, topic.id)
            await audit.record(
                conn,
                caller.organisation_id,
                actor,
                "topic.updated",
                audit_target(caller.environment_id, name),
                **changed,
            )
        self._routes.forget(caller.environment_id, name)
        return topic_view(topic, source)

    async def delete(self, caller: Caller, name: str, actor: Actor) -> TopicView:
        """The topic is gone and its name free at once; :meth:`queue_cleanup` removes its data."""
        async with self._db.connection() as conn:
            topic = await topics.delete_topic(conn, caller.environment_id, name)
            target = audit_target(caller.environment_id, name)
            await audit.record(conn, caller.organisation_id, actor, "topic.deleted", target)
        self._routes.forget(caller.environment_id, name)
        return topic_view(topic)

    async def queue_cleanup(self, topic_id: str) -> None:
        """Ask a worker to remove a deleted topic's data now (the periodic sweep is the
        backstop, so a broker that is down is logged, not raised)."""

        def send() -> None:
            send_task(DELETE_TOPIC_DATA, kwargs={"topic_id": topic_id})

        try:
            await anyio.to_thread.run_sync(send)
        except Exception as exc:
            log.warning("topic_cleanup_not_queued", topic_id=topic_id, error=type(exc).__name__)

    async def summaries(self, caller: Caller) -> list[TopicSummary]:
        """The environment's topics with the messages each retains."""
        async with self._db.connection() as conn:
            return await overview.topic_summaries(conn, caller.environment_id)

    async def detail(
        self, caller: Caller, name: str, window: TrafficWindow
    ) -> tuple[TopicDetail, TrafficSeries]:
        """A topic with its partitions and groups, and its traffic over ``window``."""
        async with self._db.connection() as conn:
            detail = await overview.topic_detail(conn, caller.environment_id, name)
            series = await traffic.topic_traffic(conn, detail.topic.id, window)
        return detail, series


def _changed(before: TopicView, after: TopicView) -> dict[str, Any]:
    """What an update changed, as ``{field: "old → new"}``."""
    fields = ("partitions", "retention", "latency_class")
    return {
        field: f"{getattr(before, field)} → {getattr(after, field)}"
        for field in fields
        if getattr(before, field) != getattr(after, field)
    }
