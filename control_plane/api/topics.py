"""``/v1/topics``: topic management (admin scope) and publishing (publish scope)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated, Any

from litestar import Controller, Request, Response, delete, get, patch, post
from litestar.background_tasks import BackgroundTask
from litestar.di import NamedDependency
from litestar.params import Body, FromPath

from control_plane.api.publish_body import batch_body, publish_body
from control_plane.edge.auth import auth_context
from control_plane.edge.bodies import BODY_READER
from control_plane.edge.disconnect import unless_disconnected
from data_plane.service import (
    BatchItemResult,
    BatchPublishRequest,
    BatchPublishResult,
    CreateTopicRequest,
    DataPlane,
    Published,
    PublishRequest,
    PublishResult,
    TopicList,
    TopicView,
    UpdateTopicRequest,
)
from tenants.team.audit import Actor


class TopicsController(Controller):
    """Create, list, describe, update and delete the topics of the caller's environment."""

    path = "/topics"
    tags = ["topics"]
    opt = {"scope": "admin"}

    @post("/", summary="Create a topic")
    async def create_topic(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        data: Annotated[CreateTopicRequest, Body()],
    ) -> TopicView:
        """409 ``TOPIC_EXISTS`` when the name is taken; tier quotas apply; 422 ``INVALID_HOOK``
        when ``onEnqueue`` does not compile."""
        ctx = auth_context(request)
        return await data_plane.topics.create(
            ctx,
            data.name,
            Actor.api_key(ctx.key_id),
            partitions=data.partitions,
            retention=data.retention,
            delivery=data.delivery,
            latency_class=data.latency_class,
            on_enqueue=data.on_enqueue,
        )

    @get("/", summary="List the environment's topics")
    async def list_topics(
        self, request: Request[Any, Any, Any], data_plane: NamedDependency[DataPlane]
    ) -> TopicList:
        """Active topics, by name."""
        return await data_plane.topics.list_all(auth_context(request))

    @get("/{topic:str}", summary="Describe a topic")
    async def describe_topic(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
    ) -> TopicView:
        """404 ``TOPIC_NOT_FOUND`` unless the topic exists in this environment."""
        return await data_plane.topics.describe(auth_context(request), topic)

    @patch("/{topic:str}", summary="Raise partitions, change retention or latency class")
    async def update_topic(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        data: Annotated[UpdateTopicRequest, Body()],
    ) -> TopicView:
        """Partitions can only grow; retention stays within the tier's maximum."""
        ctx = auth_context(request)
        return await data_plane.topics.update(
            ctx,
            topic,
            Actor.api_key(ctx.key_id),
            partitions=data.partitions,
            retention=data.retention,
            latency_class=data.latency_class,
            on_enqueue=data.on_enqueue,
        )

    @delete(
        "/{topic:str}",
        summary="Delete a topic (its data is removed in the background)",
        status_code=202,
    )
    async def delete_topic(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
    ) -> Response[TopicView]:
        """The name is free at once; index rows and objects are cleaned up by a Celery task."""
        ctx = auth_context(request)
        deleted = await data_plane.topics.delete(ctx, topic, Actor.api_key(ctx.key_id))
        cleanup = BackgroundTask(data_plane.topics.queue_cleanup, deleted.id)
        return Response(deleted, status_code=202, background=cleanup)


class PublishController(Controller):
    """Publish one message or an atomic batch; answered once stored on S3 and committed."""

    path = "/topics/{topic:str}/messages"
    tags = ["publish"]
    opt = {"scope": "publish"}

    @post(
        "/",
        summary="Publish a message",
        description=(
            "Answered once the message is in a segment object on S3 and its offset is committed. "
            "A `key` always maps to the same partition (Kafka's murmur2 partitioner); keyless "
            "messages spread round-robin. A retried `idempotencyKey` (on topics of either "
            "delivery) returns the original `messageId`, `offset` and `partition` and stores "
            "nothing new. 503 `PUBLISH_OUTCOME_UNKNOWN`: the message may have been stored; "
            "resolve it with `GET .../messages/by-idempotency-key/{key}` or retry with the same "
            "`idempotencyKey`. "
            "`messageId` is derived from (topic, partition, offset)."
        ),
        opt={BODY_READER: publish_body},  # data stored as sent, not decoded and re-encoded
    )
    async def publish(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        data: Annotated[PublishRequest, Body()],
    ) -> PublishResult:
        """413 ``PAYLOAD_TOO_LARGE`` above the tier's message size; 503 when storage fails."""
        started = time.perf_counter()
        ctx = auth_context(request)
        [stored] = await unless_disconnected(request, data_plane.publish(ctx, topic, [data]))
        return PublishResult(
            message_id=stored.message_id,
            offset=stored.offset,
            partition=stored.partition,
            timestamp=_iso(stored),
            latency=_elapsed_ms(started),
        )

    @post(
        "/batch",
        summary="Publish up to 1000 messages atomically",
        description=(
            "All messages get offsets in one commit, or none do; within a partition a batch's "
            "offsets are consecutive. Keyless messages of a batch go to one partition. The "
            "batch size limit is the tier's (422 `QUOTA_EXCEEDED` above it)."
        ),
        opt={BODY_READER: batch_body},
    )
    async def publish_batch(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        data: Annotated[BatchPublishRequest, Body()],
    ) -> BatchPublishResult:
        """All messages get offsets in one commit, or none do."""
        started = time.perf_counter()
        ctx = auth_context(request)
        stored = await unless_disconnected(
            request, data_plane.publish(ctx, topic, data.messages, batch=True)
        )
        stamps: dict[int, str] = {}  # a batch's messages mostly share one timestamp
        return BatchPublishResult(
            count=len(stored),
            latency=_elapsed_ms(started),
            results=[
                BatchItemResult(
                    s.offset,
                    s.partition,
                    s.message_id,
                    stamps.get(s.timestamp_ms) or stamps.setdefault(s.timestamp_ms, _iso(s)),
                )
                for s in stored
            ],
        )


def _iso(stored: Published) -> str:
    moment = datetime.fromtimestamp(stored.timestamp_ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _elapsed_ms(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)
