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
    """This consumer's identity in the group, its generation and partitions.

    ``max_in_flight`` is the member's window (the server leases it no more unsettled messages),
    ``ack_timeout_s`` how long a delivered message stays leased unless extended.
    """

    member_id: str
    generation_id: int
    assignments: tuple[int, ...]
    heartbeat_interval_s: float
    max_in_flight: int | None = None
    ack_timeout_s: float = 30.0
    exactly_once: bool = True

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> Membership:
        """Build from the join answer."""
        return cls(
            body["memberId"],
            body["generationId"],
            tuple(body["assignments"]),
            body["heartbeatIntervalMs"] / 1000,
            body.get("maxInFlight"),
            body.get("ackTimeoutMs", 30_000) / 1000,
            body.get("delivery", "exactly-once") == "exactly-once",
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
    _size: int = field(default=0, repr=False)  # bytes, for flow control
    _arrived: float = field(default=0.0, repr=False)  # time.monotonic()
    _deadline: float = field(default=0.0, repr=False)  # when its lease ends, as far as we know
    _lost: bool = field(default=False, repr=False)  # its lease ended: never sent an ack
    #: its fairness key and throttle keys, when it has them (fair groups schedule by them)
    fairness_key: str | None = None
    throttle_keys: list[str] | None = None

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
            fairness_key=body.get("fairnessKey"),
            throttle_keys=body.get("throttleKeys"),
        )

    @property
    def settled(self) -> bool:
        """Whether this message was acked or nacked through this object."""
        return self._settled

    async def ack(self) -> None:
        """Mark the message done, in the background: the ack goes with the next batch.

        A refusal (its lease ended) goes to the consumer's ``error`` callback; to wait for the
        verdict (exactly-once work), use :meth:`ack_with_result`.
        """
        self._consumer.queue_ack(self, wait=False)

    async def ack_with_result(self) -> None:
        """Mark the message done and wait for the server's verdict; :class:`AckRejected` when
        its lease had ended (the message will be, or was, delivered again)."""
        done = self._consumer.queue_ack(self, wait=True)
        assert done is not None
        await done

    async def nack(self, error: str | None = None, retry_delay: Duration | None = None) -> bool:
        """Fail the message: retried after ``retry_delay · 2^(attempt-1)``; True if dead-lettered.

        Sent with the next batch; :class:`AckRejected` when its lease had ended."""
        done = self._consumer.queue_nack(self, error, retry_delay, wait=True)
        assert done is not None
        return bool(await done)

    async def extend(self, seconds: Duration) -> bool:
        """Keep the lease ``seconds`` from now (whole seconds, rounded up); False when it had
        ended. Held messages are extended automatically; this is for a longer lease at once."""
        return await self._consumer.extend_message(self, seconds)
