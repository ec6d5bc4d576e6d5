"""Fetch and ListOffsets: partitions read by offset through the data plane's reader.

A fetch that finds fewer than ``min_bytes`` waits, up to ``max_wait``, on the process's publish
listener (the writer's ``NOTIFY``, as waiting pulls do), registered before it reads so a publish
in between is not missed; it never polls. Each partition's messages go out as one uncompressed
record batch at their offsets (the same numbers REST shows).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from core.db import rearm
from data_plane.service import OffsetOutOfRange, TopicRoute
from kafka_protocol import wire
from kafka_protocol.errors import code_of
from kafka_protocol.handlers.cluster import has_scope
from kafka_protocol.mapping import to_record
from kafka_protocol.records import encode_batch
from kafka_protocol.session import Session
from kafka_protocol.versions import Api
from observability.logging import get_logger

log = get_logger("queuecore.kafka")

MAX_RECORDS_PER_PARTITION = 2000
LATEST, EARLIEST = -1, -2


@dataclass
class _Part:
    """One partition of a fetch and what was read for it."""

    topic: str
    partition: int
    offset: int
    max_bytes: int
    route: TopicRoute | None = None
    error: ErrorCode = ErrorCode.none
    high_watermark: int = -1
    log_start: int = -1
    records: bytes = b""


async def fetch(session: Session, head: wire.RequestHead, body: Any) -> Any:
    """Read every requested partition, waiting for ``min_bytes`` up to ``max_wait``."""
    cls = wire.response_type(Api.FETCH, head.api_version)
    parts = [
        _Part(topic.topic, p.partition, p.fetch_offset, p.partition_max_bytes)
        for topic in body.topics
        for p in topic.partitions
    ]
    if has_scope(session, "consume"):
        await _resolve(session, parts)
    else:
        for part in parts:
            part.error = ErrorCode.topic_authorization_failed
    deadline = time.monotonic() + wire.millis(body.max_wait) / 1000
    await _read_until(session, parts, max(body.min_bytes, 1), body.max_bytes, deadline)
    return _response(cls, body, parts)


async def _resolve(session: Session, parts: list[_Part]) -> None:
    auth = session.auth
    assert auth is not None
    records = session.services.data_plane.records
    for part in parts:
        try:
            part.route = await records.route(auth, part.topic)
        except Exception as exc:
            part.error = code_of(exc)
            continue
        if not 0 <= part.partition < part.route.partitions:
            part.error = ErrorCode.unknown_topic_or_partition


async def _read_until(
    session: Session, parts: list[_Part], min_bytes: int, max_bytes: int, deadline: float
) -> None:
    listener = session.services.data_plane.listener
    live = [p for p in parts if p.route is not None and p.error == ErrorCode.none]
    while True:
        with contextlib.ExitStack() as stack:
            event = asyncio.Event()
            for topic_id, partitions in _watched(live).items():
                watch = stack.enter_context(listener.watch(topic_id, partitions))
                watch.event = event  # one event for every topic of the fetch
            rearm()  # each read of a waiting fetch gets the request's whole time for PostgreSQL
            total = await _read_all(session, live, max_bytes)
            remaining = deadline - time.monotonic()
            if total >= min_bytes or remaining <= 0 or not live or session.closing.is_set():
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)


def _watched(parts: list[_Part]) -> dict[str, frozenset[int]]:
    watched: dict[str, set[int]] = {}
    for part in parts:
        assert part.route is not None
        watched.setdefault(part.route.target.id, set()).add(part.partition)
    return {topic_id: frozenset(partitions) for topic_id, partitions in watched.items()}


async def _read_all(session: Session, parts: list[_Part], max_bytes: int) -> int:
    """Read every partition at once, each within its own budget and the response's."""
    budget = max(1, max_bytes // max(1, len(parts)))
    for part in parts:
        part.max_bytes = min(part.max_bytes, budget)
    return sum(await asyncio.gather(*(_read(session, part) for part in parts)))


async def _read(session: Session, part: _Part) -> int:
    """Read one partition into ``part``; the bytes of its records."""
    assert part.route is not None and session.auth is not None
    records = session.services.data_plane.records
    try:
        result = await records.read(
            session.auth,
            part.route.target.id,
            part.partition,
            part.offset,
            MAX_RECORDS_PER_PARTITION,
            part.max_bytes,
        )
    except OffsetOutOfRange as exc:
        part.error = ErrorCode.offset_out_of_range
        part.log_start, part.high_watermark = exc.data["earliest"], exc.data["latest"]
        return 0
    except Exception as exc:
        part.error = code_of(exc)
        if part.error == ErrorCode.unknown_server_error:
            log.warning("kafka_fetch_failed", error=type(exc).__name__, exc_info=exc)
        return 0
    part.log_start, part.high_watermark = result.earliest_offset, result.latest_offset
    # At least one record, even one larger than the partition's budget, as Kafka does.
    found = [to_record(stored.message) for stored in result.messages]
    part.records = encode_batch(part.offset, found) if found else b""
    return len(part.records)


def _response(cls: type[Any], body: Any, parts: list[_Part]) -> Any:
    topic_cls = wire.nested(cls, "FetchableTopicResponse")
    partition_cls = wire.nested(cls, "PartitionData")
    by_topic: dict[str, list[Any]] = {}
    for part in parts:
        by_topic.setdefault(part.topic, []).append(
            wire.entity(
                partition_cls,
                partition_index=part.partition,
                error_code=part.error,
                high_watermark=part.high_watermark,
                last_stable_offset=part.high_watermark,
                log_start_offset=part.log_start,
                aborted_transactions=None,
                preferred_read_replica=-1,
                records=part.records,
            )
        )
    topics = tuple(
        wire.entity(topic_cls, topic=name, partitions=tuple(items))
        for name, items in by_topic.items()
    )
    return wire.entity(
        cls, throttle_time=0, error_code=ErrorCode.none, session_id=0, responses=topics
    )


async def list_offsets(session: Session, head: wire.RequestHead, body: Any) -> Any:
    """Earliest (-2), latest (-1), or the first offset at or after a timestamp."""
    cls = wire.response_type(Api.LIST_OFFSETS, head.api_version)
    topic_cls = wire.nested(cls, "ListOffsetsTopicResponse")
    partition_cls = wire.nested(cls, "ListOffsetsPartitionResponse")
    topics = []
    for topic in body.topics:
        answers = []
        for p in topic.partitions:
            code, offset, timestamp = await _offset(
                session, topic.name, p.partition_index, p.timestamp
            )
            answers.append(
                wire.entity(
                    partition_cls,
                    partition_index=p.partition_index,
                    error_code=code,
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=0,
                    old_style_offsets=(offset,) if offset >= 0 else (),
                )
            )
        topics.append(wire.entity(topic_cls, name=topic.name, partitions=tuple(answers)))
    return wire.entity(cls, throttle_time=0, topics=tuple(topics))


async def _offset(
    session: Session, topic: str, partition: int, timestamp: int
) -> tuple[ErrorCode, int, int]:
    if not has_scope(session, "consume"):
        return ErrorCode.topic_authorization_failed, -1, -1
    auth = session.auth
    assert auth is not None
    records = session.services.data_plane.records
    try:
        route = await records.route(auth, topic)
        if not 0 <= partition < route.partitions:
            return ErrorCode.unknown_topic_or_partition, -1, -1
        topic_id = route.target.id
        if timestamp in (LATEST, EARLIEST) or timestamp < 0:
            bounds = await records.bounds(topic_id, partition)
            return ErrorCode.none, bounds.earliest if timestamp == EARLIEST else bounds.latest, -1
        seek = await records.offset_at(topic_id, partition, timestamp)
    except Exception as exc:
        return code_of(exc), -1, -1
    if seek.offset >= seek.latest:
        return ErrorCode.none, -1, -1  # nothing at or after that moment
    return ErrorCode.none, seek.offset, timestamp
