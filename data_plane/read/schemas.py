"""The wire shape of a message (camelCase JSON), defined once: as the browser shows it
(:class:`MessageView`), as a pull or a stream delivers it (:class:`DeliveredMessage`), and as
a dead-letter queue lists it (``data_plane.deadletters.service.DeadLetterView``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

from data_plane.read.reader import ReadResult, StoredMessage
from data_plane.write.segment import Schedule

ENCODINGS: tuple[str | None, ...] = (None, "base64", None)
"""The ``encoding`` a wire view shows for each ``Message.encoding`` (JSON, BYTES, NULL)."""


class MessageView(msgspec.Struct, rename="camel", omit_defaults=True):
    """A stored message; ``data`` is the JSON value exactly as published, or, with
    ``"encoding": "base64"``, the base64 of a value a Kafka client produced that was not JSON."""

    message_id: str
    topic: str
    partition: int
    offset: int
    data: msgspec.Raw
    key: str | None
    headers: dict[str, str]
    timestamp: str
    encoding: str | None = None
    fairness_key: str | None = None
    throttle_keys: list[str] | None = None


class DeliveredMessage(MessageView, kw_only=True):
    """A message leased to a member: its delivery attempt and the id that settles it."""

    attempt: int
    ack_id: str


class MessagePage(msgspec.Struct, rename="camel"):
    """Messages from an offset and where to continue.

    ``nextOffset`` is the offset to ask for next; ``earliestOffset`` is the first retained
    offset and ``latestOffset`` the end of the partition (the offset of the next publish).
    """

    messages: list[MessageView]
    next_offset: int
    earliest_offset: int
    latest_offset: int


def iso_timestamp(timestamp_ms: int) -> str:
    """``2026-03-28T10:42:18.003Z``, as in the QueueCore guide."""
    moment = datetime.fromtimestamp(timestamp_ms / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{timestamp_ms % 1000:03d}Z"


def message_view(topic: str, partition: int, message_id: str, stored: StoredMessage) -> MessageView:
    """The wire view of one stored message."""
    message = stored.message
    return MessageView(
        message_id=message_id,
        topic=topic,
        partition=partition,
        offset=stored.offset,
        data=msgspec.Raw(message.value),
        key=None if message.key is None else message.key.decode(errors="replace"),
        headers=message.headers,
        timestamp=iso_timestamp(message.timestamp_ms),
        encoding=ENCODINGS[message.encoding],
        **scheduling(message.schedule),
    )


def scheduling(schedule: Schedule | None) -> dict[str, Any]:
    """A view's ``fairnessKey`` and ``throttleKeys`` (only those the message has)."""
    if schedule is None:
        return {}
    fields: dict[str, Any] = {}
    if schedule.fairness_key is not None:
        fields["fairness_key"] = schedule.fairness_key
    if schedule.throttle_keys:
        fields["throttle_keys"] = list(schedule.throttle_keys)
    return fields


def message_page(topic: str, partition: int, result: ReadResult, ids: list[str]) -> MessagePage:
    """The wire view of a read."""
    return MessagePage(
        messages=[
            message_view(topic, partition, message_id, stored)
            for message_id, stored in zip(ids, result.messages, strict=True)
        ],
        next_offset=result.next_offset,
        earliest_offset=result.earliest_offset,
        latest_offset=result.latest_offset,
    )
