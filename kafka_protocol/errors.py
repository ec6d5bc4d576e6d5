"""QueueCore's errors as Kafka error codes: the one place the mapping lives."""

from __future__ import annotations

import psycopg
from kio.schema.errors import ErrorCode
from psycopg_pool import PoolTimeout

from core.errors import ClientError, QueueCoreError, Unavailable, ValidationFailed
from data_plane.service import (
    MessageTooLarge,
    NoSuchPartition,
    OffsetOutOfRange,
    OutOfOrderSequence,
    PartitionNotFound,
    PublishOutcomeUnknown,
    QuotaExceeded,
    TopicExists,
    TopicNotFound,
)
from kafka_protocol.compression import CompressionError
from kafka_protocol.mapping import InvalidRecord
from kafka_protocol.records import CorruptBatch

_BY_TYPE: list[tuple[type[BaseException], ErrorCode]] = [
    (TopicNotFound, ErrorCode.unknown_topic_or_partition),
    (NoSuchPartition, ErrorCode.unknown_topic_or_partition),
    (PartitionNotFound, ErrorCode.unknown_topic_or_partition),
    (TopicExists, ErrorCode.topic_already_exists),
    (QuotaExceeded, ErrorCode.invalid_partitions),
    (MessageTooLarge, ErrorCode.message_too_large),
    (OffsetOutOfRange, ErrorCode.offset_out_of_range),
    (OutOfOrderSequence, ErrorCode.out_of_order_sequence_number),
    (InvalidRecord, ErrorCode.invalid_record),
    (CorruptBatch, ErrorCode.corrupt_message),
    (CompressionError, ErrorCode.corrupt_message),
    (PublishOutcomeUnknown, ErrorCode.request_timed_out),
    (Unavailable, ErrorCode.kafka_storage_error),
    # PostgreSQL out of reach, stalled or ending the session: retriable, as the HTTP API's 503.
    (psycopg.OperationalError, ErrorCode.kafka_storage_error),
    (psycopg.InterfaceError, ErrorCode.kafka_storage_error),
    (psycopg.InternalError, ErrorCode.kafka_storage_error),
    (PoolTimeout, ErrorCode.kafka_storage_error),
    (ValidationFailed, ErrorCode.invalid_topic_exception),
    (ClientError, ErrorCode.policy_violation),
]


def code_of(exc: BaseException) -> ErrorCode:
    """The Kafka error code of an exception (retriable ones for server-side trouble)."""
    for kind, code in _BY_TYPE:
        if isinstance(exc, kind):
            return code
    return ErrorCode.unknown_server_error


def message_of(exc: BaseException) -> str:
    """The text a client shows beside the code (a QueueCore error's own message)."""
    if isinstance(exc, QueueCoreError | InvalidRecord | CorruptBatch | CompressionError):
        return str(exc)
    if isinstance(exc, OutOfOrderSequence):
        return str(exc)
    return "internal error"
