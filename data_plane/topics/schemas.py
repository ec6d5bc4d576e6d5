"""Wire shapes of the topics and publish API (camelCase JSON)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

from core.wire_types import Text
from data_plane.topics.service import (
    MAX_NAME_LENGTH,
    MAX_PARTITIONS,
    NAME_PATTERN,
    RETENTION_PATTERN,
)

Delivery = Literal["exactly-once", "at-least-once"]
LatencyClass = Literal["express", "standard"]
# Plain types: the service checks these (its messages are friendlier than a pattern's, and a NUL
# or a huge number never passes it); the OpenAPI document says what it accepts.
TopicName = Annotated[
    str,
    msgspec.Meta(
        extra_json_schema={"pattern": NAME_PATTERN, "minLength": 1, "maxLength": MAX_NAME_LENGTH}
    ),
]
Retention = Annotated[str, msgspec.Meta(extra_json_schema={"pattern": RETENTION_PATTERN})]
Partitions = Annotated[
    int, msgspec.Meta(extra_json_schema={"minimum": 1, "maximum": MAX_PARTITIONS})
]

IdempotencyKey = Annotated[Text, msgspec.Meta(min_length=1, max_length=256)]
FairnessKey = Annotated[Text, msgspec.Meta(max_length=200)]
ThrottleKey = Annotated[Text, msgspec.Meta(min_length=1, max_length=200)]
ThrottleKeys = Annotated[list[ThrottleKey], msgspec.Meta(max_length=8)]
HookSource = Annotated[Text, msgspec.Meta(min_length=1, max_length=16_384)]


class CreateTopicRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``POST /v1/topics``."""

    name: TopicName
    retention: Retention = "7d"
    delivery: Delivery = "exactly-once"
    partitions: Partitions = 3
    latency_class: LatencyClass = "express"
    on_enqueue: HookSource | None = None  # Lua: function on_enqueue(msg) (docs/fair-scheduling.md)


class UpdateTopicRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``PATCH /v1/topics/{topic}``: raise partitions, change retention or latency class."""

    partitions: Partitions | None = None
    retention: Retention | None = None
    latency_class: LatencyClass | None = None
    # absent: unchanged; null: removed
    on_enqueue: HookSource | msgspec.UnsetType | None = msgspec.UNSET


class TopicStats(msgspec.Struct, rename="camel"):
    """Retained messages, messages leased to consumers, live consumers, consumer groups."""

    depth: int
    in_flight: int
    active_consumers: int
    consumer_groups: int


class TopicView(msgspec.Struct, rename="camel", omit_defaults=True):
    """A topic as the API shows it; ``stats`` only in the describe response."""

    id: str
    name: str
    partitions: int
    retention: str
    delivery: Delivery
    latency_class: LatencyClass
    status: Literal["active", "deleting"]
    created_at: datetime
    stats: TopicStats | None = None
    on_enqueue: str | None = None  # the topic's onEnqueue hook, when it has one


class TopicList(msgspec.Struct, rename="camel"):
    """``GET /v1/topics``."""

    topics: list[TopicView]


class PublishRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """One message: ``data`` is any JSON value; ``key`` picks the partition."""

    data: Any  # from a REST publish: msgspec.Raw, the JSON as sent (control_plane/api/publish_body)
    key: Text | None = None
    headers: dict[Text, Text] | None = None
    idempotency_key: IdempotencyKey | None = None
    fairness_key: FairnessKey | None = None  # a fair group's scheduling key ("" is a key)
    throttle_keys: ThrottleKeys | None = None  # each must have a token for delivery


class BatchPublishRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``POST /v1/topics/{topic}/messages/batch``: up to the tier's batch size, atomic."""

    messages: Annotated[list[PublishRequest], msgspec.Meta(min_length=1)]


class PublishResult(msgspec.Struct, rename="camel"):
    """Where a published message was stored."""

    message_id: str
    offset: int
    partition: int
    timestamp: str
    latency: int


class BatchItemResult(msgspec.Struct, rename="camel"):
    """One message of a batch, in request order."""

    offset: int
    partition: int
    message_id: str
    timestamp: str  # when it was stored (a repeated idempotency key: the original's)


class BatchPublishResult(msgspec.Struct, rename="camel"):
    """A batch committed as one."""

    count: int
    latency: int
    results: list[BatchItemResult]
