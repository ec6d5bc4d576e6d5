"""One accounting record per publish request, from which every counter of a publish is fed.

A REST publish (single or batch) and a Kafka record batch each make one :class:`PublishRecord`
once their messages are answered; :meth:`Accounting.record` then feeds the usage meter (billing),
the two OpenTelemetry counters and, when the GreptimeDB switch is on, the producer series (one
update per partition, not per message). The request itself is metered by the rate limiter when
admitted (every category, whatever the outcome), and the topic traffic counter counts what the
writer committed (its after-commit hook): a publish answered from its idempotency key stored
nothing new.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from data_plane.write.writer import MESSAGE_OVERHEAD_BYTES, Placement
from observability import metrics
from observability.producers import ProducerKey


class Producer(NamedTuple):
    """Who published, for the producer series: an API key in its project and environment."""

    project_id: str
    environment: str
    key_id: str

    @classmethod
    def of(cls, caller: object) -> Producer | None:
        """The producer of a caller holding an API key's context; None for other callers."""
        key_id = getattr(caller, "key_id", None)
        if not isinstance(key_id, str):
            return None
        return cls(getattr(caller, "project_id", ""), getattr(caller, "environment", ""), key_id)


class PublishRecord(NamedTuple):
    """What one publish request stored, as every counter needs it."""

    organisation_id: str
    environment_id: str
    topic: str
    exactly_once: bool
    latency_class: str
    messages: int
    size_bytes: int  # encoded, with the writer's per-message overhead
    placements: list[Placement]
    producer: Producer | None = None

    @property
    def payload_bytes(self) -> int:
        """Data, keys and headers, as the message size limit counts them."""
        return self.size_bytes - self.messages * MESSAGE_OVERHEAD_BYTES


class UsageSink(Protocol):
    """Where traffic is metered (billing's in-memory meter): called once per request."""

    def published(self, environment_id: str, messages: int, payload_bytes: int) -> None:
        """``messages`` stored (or answered from their idempotency keys), ``payload_bytes`` of
        data, keys and headers as the message size limit counts them."""

    def delivered(self, environment_id: str, messages: int, payload_bytes: int) -> None:
        """``messages`` sent to a consumer or a browser (egress), ``payload_bytes`` as above."""


class ProducerSink(Protocol):
    """The producer series' in-memory counts (``observability.producers.ProducerActivity``)."""

    def published(self, key: ProducerKey, offset: int, messages: int = 1) -> None:
        """``messages`` stored by ``key``'s producer, the last at ``offset``."""


class Accounting:
    """Feeds each counter of a publish from its one record."""

    def __init__(self, usage: UsageSink | None = None) -> None:
        self.usage = usage
        self.producers: ProducerSink | None = None  # set when the producer series is on

    def record(self, record: PublishRecord) -> None:
        """Count one publish request everywhere it is counted."""
        if self.usage is not None:
            self.usage.published(record.environment_id, record.messages, record.payload_bytes)
        # Per request: a tenant's topic is never an attribute (docs/observability.md).
        attributes = metrics.publish_attributes(record.exactly_once, record.latency_class)
        metrics.MESSAGES_PUBLISHED.add(record.messages, attributes)
        metrics.PUBLISHED_BYTES.add(record.size_bytes, attributes)
        if self.producers is not None and record.producer is not None:
            self._producers(self.producers, record, record.producer)

    @staticmethod
    def _producers(sink: ProducerSink, record: PublishRecord, producer: Producer) -> None:
        last: dict[int, list[int]] = {}  # partition -> [last offset, messages]
        for placement in record.placements:
            seen = last.get(placement.partition)
            if seen is None:
                last[placement.partition] = [placement.offset, 1]
            else:
                seen[0] = max(seen[0], placement.offset)
                seen[1] += 1
        for partition, (offset, messages) in last.items():
            key = ProducerKey(
                record.organisation_id,
                producer.project_id,
                producer.environment,
                record.topic,
                producer.key_id,
                partition,
            )
            sink.published(key, offset, messages)
