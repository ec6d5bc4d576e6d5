"""Metadata, FindCoordinator, CreateTopics, DeleteTopics and InitProducerId.

The cluster a client sees is one broker (node 0) at the address of the listener it connected
through, leader of every partition and coordinator of every group: behind it, every replica
serves every partition and group. Its topics are the active topics of the key's environment
(never another environment's or organisation's); topics are not created on first use.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from data_plane.service import TopicView
from kafka_protocol import wire
from kafka_protocol.errors import code_of, message_of
from kafka_protocol.session import Session
from kafka_protocol.versions import Api
from observability.logging import get_logger
from tenants.team.audit import Actor

log = get_logger("queuecore.kafka")

NODE_ID = 0
CLUSTER_ID = "queuecore"


def _auth(session: Session) -> Any:
    assert session.auth is not None  # only authenticated requests reach the handlers
    return session.auth


def has_scope(session: Session, scope: str) -> bool:
    """Whether the connection's key carries ``scope``."""
    return scope in _auth(session).scopes


async def metadata(session: Session, head: wire.RequestHead, body: Any) -> Any:
    """The broker, and the requested (or all) topics of the key's environment."""
    cls = wire.response_type(Api.METADATA, head.api_version)
    listed = await session.services.data_plane.topics.list_all(_auth(session))
    topics = {t.name: t for t in listed.topics}
    wanted = list(topics) if body.topics is None else [t.name for t in body.topics]
    broker = wire.entity(
        wire.nested(cls, "MetadataResponseBroker"),
        node_id=NODE_ID,
        host=session.listener.host,
        port=session.listener.port,
        rack=None,
    )
    return wire.entity(
        cls,
        throttle_time=0,
        brokers=(broker,),
        cluster_id=CLUSTER_ID,
        controller_id=NODE_ID,
        topics=tuple(_topic_metadata(cls, name, topics.get(name)) for name in wanted),
        cluster_authorized_operations=-2147483648,
    )


def _topic_metadata(cls: type[Any], name: str, topic: TopicView | None) -> Any:
    topic_cls = wire.nested(cls, "MetadataResponseTopic")
    if topic is None:
        return wire.entity(
            topic_cls,
            error_code=ErrorCode.unknown_topic_or_partition,
            name=name,
            is_internal=False,
            partitions=(),
            topic_authorized_operations=-2147483648,
        )
    partition_cls = wire.nested(cls, "MetadataResponsePartition")
    partitions = tuple(
        wire.entity(
            partition_cls,
            error_code=ErrorCode.none,
            partition_index=index,
            leader_id=NODE_ID,
            leader_epoch=0,
            replica_nodes=(NODE_ID,),
            isr_nodes=(NODE_ID,),
            offline_replicas=(),
        )
        for index in range(topic.partitions)
    )
    return wire.entity(
        topic_cls,
        error_code=ErrorCode.none,
        name=name,
        is_internal=False,
        partitions=partitions,
        topic_authorized_operations=-2147483648,
    )


async def find_coordinator(session: Session, head: wire.RequestHead, body: Any) -> Any:
    """Every replica coordinates every group: the answer is the listener's own address."""
    cls = wire.response_type(Api.FIND_COORDINATOR, head.api_version)
    return wire.entity(
        cls,
        throttle_time=0,
        error_code=ErrorCode.none,
        error_message=None,
        node_id=NODE_ID,
        host=session.listener.host,
        port=session.listener.port,
    )


async def create_topics(session: Session, head: wire.RequestHead, body: Any) -> Any:
    """Create topics (scope ``admin``) with the tier's quotas, as ``POST /v1/topics`` does."""
    cls = wire.response_type(Api.CREATE_TOPICS, head.api_version)
    result_cls = wire.nested(cls, "CreatableTopicResult")
    results = [
        await _create_one(session, result_cls, topic, body.validate_only) for topic in body.topics
    ]
    return wire.entity(cls, throttle_time=0, topics=tuple(results))


async def _create_one(session: Session, cls: type[Any], topic: Any, validate_only: bool) -> Any:
    def result(code: ErrorCode, message: str | None = None, partitions: int = -1) -> Any:
        return wire.entity(
            cls,
            name=topic.name,
            error_code=code,
            error_message=message,
            topic_config_error_code=0,
            num_partitions=partitions,
            replication_factor=1 if partitions > 0 else -1,
            configs=(),
        )

    if not has_scope(session, "admin"):
        return result(ErrorCode.topic_authorization_failed, "this API key lacks the 'admin' scope")
    partitions = topic.num_partitions if topic.num_partitions > 0 else 3
    if validate_only:
        return result(ErrorCode.none, None, partitions)
    auth = _auth(session)
    try:
        created = await session.services.data_plane.topics.create(
            auth, topic.name, Actor.api_key(auth.key_id), partitions=partitions
        )
    except Exception as exc:
        return result(code_of(exc), message_of(exc))
    log.info("kafka_topic_created", topic=created.name, partitions=created.partitions)
    return result(ErrorCode.none, None, created.partitions)


async def delete_topics(session: Session, head: wire.RequestHead, body: Any) -> Any:
    """Delete topics (scope ``admin``) as ``DELETE /v1/topics/{topic}`` does."""
    cls = wire.response_type(Api.DELETE_TOPICS, head.api_version)
    result_cls = wire.nested(cls, "DeletableTopicResult")
    results = []
    for name in body.topic_names:
        code, message = await _delete_one(session, name)
        results.append(wire.entity(result_cls, name=name, error_code=code, error_message=message))
    return wire.entity(cls, throttle_time=0, responses=tuple(results))


async def _delete_one(session: Session, name: str) -> tuple[ErrorCode, str | None]:
    if not has_scope(session, "admin"):
        return ErrorCode.topic_authorization_failed, "this API key lacks the 'admin' scope"
    auth = _auth(session)
    data_plane = session.services.data_plane
    try:
        deleted = await data_plane.topics.delete(auth, name, Actor.api_key(auth.key_id))
    except Exception as exc:
        return code_of(exc), message_of(exc)
    await data_plane.topics.queue_cleanup(deleted.id)
    return ErrorCode.none, None


async def init_producer_id(session: Session, head: wire.RequestHead, body: Any) -> Any:
    """A new producer id for an idempotent producer (scope ``publish``); no transactions."""
    cls = wire.response_type(Api.INIT_PRODUCER_ID, head.api_version)

    def answer(code: ErrorCode, producer_id: int = -1, epoch: int = -1) -> Any:
        return wire.entity(
            cls, throttle_time=0, error_code=code, producer_id=producer_id, producer_epoch=epoch
        )

    if body.transactional_id is not None:
        return answer(ErrorCode.transactional_id_authorization_failed)
    if not has_scope(session, "publish"):
        return answer(ErrorCode.cluster_authorization_failed)
    producer_id = await session.services.data_plane.records.next_producer_id()
    return answer(ErrorCode.none, producer_id, 0)
