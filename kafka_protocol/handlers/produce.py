"""Produce: each partition's record batches appended through the data plane's write path.

``acks=all`` and ``acks=1`` are answered once the records are durable as a REST publish is (the
segment on S3, the offsets committed); ``acks=0`` gets no answer, though the records are still
written. Partitions of one request are appended concurrently, so they share the writer's flush.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kio.schema.errors import ErrorCode

from data_plane.service import Appended, ProducerBatch, TopicRoute
from kafka_protocol import wire
from kafka_protocol.errors import code_of, message_of
from kafka_protocol.handlers.cluster import has_scope
from kafka_protocol.mapping import InvalidRecord, to_message
from kafka_protocol.records import NO_PRODUCER_ID, RecordBatch, decode_batches
from kafka_protocol.session import Session
from kafka_protocol.versions import Api
from observability.logging import get_logger

log = get_logger("queuecore.kafka")
_background: set[asyncio.Task[Any]] = set()


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


async def produce(session: Session, head: wire.RequestHead, body: Any) -> Any:
    """Append every partition's batches; the answer (none for ``acks=0``)."""
    work = _append_all(session, head, body)
    if body.acks == 0:
        task = asyncio.ensure_future(work)
        _background.add(task)
        task.add_done_callback(_background.discard)
        return None
    return await work


async def _append_all(session: Session, head: wire.RequestHead, body: Any) -> Any:
    cls = wire.response_type(Api.PRODUCE, head.api_version)
    topic_cls = wire.nested(cls, "TopicProduceResponse")
    partition_cls = wire.nested(cls, "PartitionProduceResponse")
    jobs = [
        _append_partition(session, body, topic.name, data.index, data.records)
        for topic in body.topic_data
        for data in topic.partition_data
    ]
    outcomes = iter(await asyncio.gather(*jobs))
    topics = []
    for topic in body.topic_data:
        partitions = []
        for data in topic.partition_data:
            code, message, base_offset, append_ms = next(outcomes)
            partitions.append(
                wire.entity(
                    partition_cls,
                    index=data.index,
                    error_code=code,
                    base_offset=base_offset,
                    log_append_time=append_ms,
                    log_start_offset=-1,
                    record_errors=(),
                    error_message=message,
                )
            )
        topics.append(
            wire.entity(topic_cls, name=topic.name, partition_responses=tuple(partitions))
        )
    return wire.entity(cls, responses=tuple(topics), throttle_time=0)


async def _append_partition(
    session: Session, body: Any, topic: str, partition: int, records: bytes | None
) -> tuple[ErrorCode, str | None, int, int]:
    """``(error, message, base offset, append time)`` of one partition's batches."""
    try:
        if body.acks not in (-1, 0, 1):
            raise _Refused(ErrorCode.invalid_required_acks, "acks must be -1 (all), 0 or 1")
        if not has_scope(session, "publish"):
            raise _Refused(
                ErrorCode.topic_authorization_failed, "this API key lacks the 'publish' scope"
            )
        if body.transactional_id is not None:
            raise _Refused(
                ErrorCode.transactional_id_authorization_failed, "transactions are not supported"
            )
        batches = decode_batches(records or b"", session.services.max_request_bytes)
        if not batches:
            raise _Refused(ErrorCode.corrupt_message, "no record batch for this partition")
        auth = session.auth
        assert auth is not None
        route = await session.services.data_plane.records.route(auth, topic)
        first: Appended | None = None
        for batch in batches:
            appended = await _append_batch(session, route, partition, batch)
            first = first or appended
        assert first is not None
        return ErrorCode.none, None, first.base_offset, first.timestamp_ms
    except _Refused as refused:
        return refused.code, str(refused), -1, -1
    except Exception as exc:
        code = code_of(exc)
        if code == ErrorCode.unknown_server_error:
            log.warning("kafka_produce_failed", error=type(exc).__name__, exc_info=exc)
        return code, message_of(exc), -1, -1


async def _append_batch(
    session: Session, route: TopicRoute, partition: int, batch: RecordBatch
) -> Appended:
    if batch.transactional or batch.control:
        raise _Refused(
            ErrorCode.invalid_record, "transactional and control batches are not supported"
        )
    now_ms = time.time_ns() // 1_000_000
    try:
        messages = [to_message(record, now_ms) for record in batch.records]
    except InvalidRecord as exc:
        raise _Refused(ErrorCode.invalid_record, str(exc)) from exc
    if not messages:
        raise _Refused(ErrorCode.corrupt_message, "an empty record batch")
    producer = None
    if batch.producer_id != NO_PRODUCER_ID and batch.base_sequence >= 0:
        producer = ProducerBatch(
            batch.producer_id, batch.producer_epoch, batch.base_sequence, len(messages)
        )
    return await session.services.data_plane.records.append(route, partition, messages, producer)
