"""What a consumer hands out and keeps: leased messages, its membership, consume-time settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from queuecore.models import Duration, parse_time

if TYPE_CHECKING:
    from queuecore.consumer import AsyncConsumer


@dataclass(frozen=True)
class Membership:
    """This consumer's identity in the group, its generation and partitions."""

    member_id: str
    generation_id: int
    assignments: tuple[int, ...]
    heartbeat_interval_s: float

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> Membership:
        """Build from the join answer."""
        return cls(
            body["memberId"],
            body["generationId"],
            tuple(body["assignments"]),
            body["heartbeatIntervalMs"] / 1000,
        )


@dataclass(frozen=True)
class GroupSettings:
    """Group settings given at consume time; applied (admin scope) before joining."""

    start_from: str | None = None
    ack_timeout: Duration | None = None
    max_in_flight: int | None = None
    dead_letter: Any = None

    def given(self) -> bool:
        """Whether any setting was given."""
        values = (self.start_from, self.ack_timeout, self.max_in_flight, self.dead_letter)
        return any(v is not None for v in values)


@dataclass(eq=False)
class AsyncMessage:
    """A message leased to this consumer: settle it with :meth:`ack` or :meth:`nack`."""

    message_id: str
    topic: str
    partition: int
    offset: int
    data: Any
    key: str | None
    headers: dict[str, str]
    timestamp: datetime
    attempt: int
    ack_id: str
    _consumer: AsyncConsumer = field(repr=False)
    _member_id: str = field(repr=False)
    _settled: bool = field(default=False, repr=False)
    #: ``"base64"`` when ``data`` is the base64 of a non-JSON value a Kafka client produced.
    encoding: str | None = None

    @classmethod
    def from_wire(
        cls, body: dict[str, Any], consumer: AsyncConsumer, member_id: str
    ) -> AsyncMessage:
        """Build from a delivered message's JSON."""
        return cls(
            body["messageId"],
            body["topic"],
            body["partition"],
            body["offset"],
            body["data"],
            body["key"],
            body["headers"],
            parse_time(body["timestamp"]),
            body["attempt"],
            body["ackId"],
            consumer,
            member_id,
            encoding=body.get("encoding"),
        )

    @property
    def settled(self) -> bool:
        """Whether this message was acked or nacked through this object."""
        return self._settled

    async def ack(self) -> None:
        """Mark the message done; :class:`AckRejected` when its lease expired or was superseded."""
        await self._consumer.ack_one(self.ack_id)
        self._consumer.settled(self)

    async def nack(self, error: str | None = None, retry_delay: Duration | None = None) -> bool:
        """Fail the message: retried after ``retry_delay · 2^(attempt-1)``; True if dead-lettered."""
        dead = await self._consumer.nack_id(self.ack_id, error, retry_delay)
        self._consumer.settled(self)
        return dead

    async def extend(self, seconds: int) -> bool:
        """Keep the lease ``seconds`` from now; False when it had already ended."""
        return await self._consumer.extend_ids([self.ack_id], seconds) == [self.ack_id]
