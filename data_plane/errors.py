"""Errors of the data plane: topics, quotas and publishing."""

from __future__ import annotations

from core.errors import ClientError, Conflict, NotFound, Unavailable, ValidationFailed


class TopicNotFound(NotFound):
    """No active topic of that name in the caller's environment."""

    code = "TOPIC_NOT_FOUND"

    def __init__(self, name: str) -> None:
        super().__init__(
            f"The topic '{name}' does not exist in the current environment.", topic=name
        )


class TopicExists(Conflict):
    """An active topic of that name exists already in the environment."""

    code = "TOPIC_EXISTS"

    def __init__(self, name: str) -> None:
        super().__init__(
            f"A topic named '{name}' already exists in the current environment.", topic=name
        )


class TopicLimitReached(Conflict):
    """The environment has as many topics as its organisation's tier allows."""

    code = "TOPIC_LIMIT_REACHED"

    def __init__(self, limit: int, tier: str) -> None:
        super().__init__(
            f"This environment already has {limit} topics, the maximum of the {tier} tier; "
            "delete a topic or upgrade the plan.",
            limit=limit,
            tier=tier,
        )


class QuotaExceeded(ValidationFailed):
    """A value is valid in itself but above what the organisation's tier allows."""

    code = "QUOTA_EXCEEDED"

    def __init__(
        self, field: str, shown: str, shown_limit: str, value: int, limit: int, tier: str
    ) -> None:
        super().__init__(
            f"{field}: {shown} exceeds the {tier} tier's maximum of {shown_limit}.",
            field=field,
            value=value,
            limit=limit,
            tier=tier,
        )


class PartitionsCannotShrink(ValidationFailed):
    """Partitions can be added to a topic, never removed (keys would move)."""

    def __init__(self, current: int, requested: int) -> None:
        super().__init__(
            f"partitions: a topic's partitions can only be increased; it has {current}, "
            f"{requested} requested.",
            field="partitions",
            current=current,
            requested=requested,
        )


class MessageTooLarge(ClientError):
    """A message's encoded data, key and headers exceed the tier's maximum message size."""

    code = "PAYLOAD_TOO_LARGE"

    def __init__(self, index: int | None, size: int, limit: int, tier: str) -> None:
        which = "The message" if index is None else f"Message {index}"
        super().__init__(
            f"{which} is {size} bytes (data, key and headers encoded); the {tier} tier "
            f"allows at most {limit} bytes per message.",
            index=index,
            size=size,
            limit=limit,
            tier=tier,
        )


class PublishUnavailable(Unavailable):
    """The flush holding this publish could not be stored or committed; nothing was written."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"The message could not be stored durably ({reason}); nothing was written. "
            "Retry the request (with the same idempotencyKey to stay exactly-once).",
            reason=reason,
            retry_after_s=1,
        )


class PublishOutcomeUnknown(Unavailable):
    """The flush's commit was sent but its answer was lost: the publish may have been stored."""

    code = "PUBLISH_OUTCOME_UNKNOWN"

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"The message may or may not have been stored ({reason}). Before publishing it "
            "again, look it up with GET /v1/topics/{topic}/messages/by-idempotency-key/{key}, "
            "or retry with the same idempotencyKey: a stored message is answered with its "
            "original offset.",
            reason=reason,
            retry_after_s=1,
        )


class IdempotencyKeyNotFound(NotFound):
    """No message of the topic was stored with that idempotency key (within its retention)."""

    code = "IDEMPOTENCY_KEY_NOT_FOUND"

    def __init__(self, topic: str, key: str) -> None:
        super().__init__(
            f"No message of the topic '{topic}' is stored with that idempotencyKey "
            "(it was never committed, or its retention passed).",
            topic=topic,
        )
