"""What the API returns, as typed, immutable values (camelCase JSON becomes snake_case)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Union

Duration = Union[str, float, timedelta]
"""``"500ms"``, ``"30s"``, ``"5m"``, ``"1h"``; a ``timedelta``; or a number of seconds."""


def duration_wire(value: Duration) -> str | int:
    """A duration as the API takes it: the string as given, else whole milliseconds."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        raise TypeError("a duration cannot be a bool")
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    return round(seconds * 1000)


def parse_time(text: str) -> datetime:
    """An ISO 8601 timestamp of the API (``…Z`` or ``+00:00``) as an aware datetime."""
    # Python before 3.11 does not read the ``Z`` suffix.
    return datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)


def _maybe_time(text: str | None) -> datetime | None:
    return None if text is None else parse_time(text)


class Unset:
    """The type of :data:`UNSET`: an argument not given (None may mean "remove")."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET = Unset()


@dataclass(frozen=True)
class OutgoingMessage:
    """One message of :meth:`QueueCore.publish_batch` with a key, headers or idempotency key.

    An item of a batch that is not an ``OutgoingMessage`` is taken as the message's data,
    whatever its type, so a dict is always data and never read as options.
    """

    data: Any
    key: str | None = None
    headers: dict[str, str] | None = None
    idempotency_key: str | None = None
    #: a fair group's scheduling key (``""`` is a key); set by the topic's onEnqueue hook if None
    fairness_key: str | None = None
    #: up to 8 throttle keys: in a fair group, each must have a token for delivery
    throttle_keys: list[str] | None = None


@dataclass(frozen=True)
class TopicStats:
    """Retained messages, messages leased to consumers, live consumers, consumer groups."""

    depth: int
    in_flight: int
    active_consumers: int
    consumer_groups: int


@dataclass(frozen=True)
class Topic:
    """A topic; ``stats`` only from :meth:`Topics.describe`."""

    id: str
    name: str
    partitions: int
    retention: str
    delivery: str
    latency_class: str
    status: str
    created_at: datetime
    stats: TopicStats | None = None
    on_enqueue: str | None = None  # the topic's Lua hook, when it has one

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> Topic:
        """Build from the API's JSON."""
        stats = body.get("stats")
        return cls(
            id=body["id"],
            name=body["name"],
            partitions=body["partitions"],
            retention=body["retention"],
            delivery=body["delivery"],
            latency_class=body["latencyClass"],
            status=body["status"],
            created_at=parse_time(body["createdAt"]),
            stats=None
            if stats is None
            else TopicStats(
                stats["depth"], stats["inFlight"], stats["activeConsumers"], stats["consumerGroups"]
            ),
            on_enqueue=body.get("onEnqueue"),
        )


@dataclass(frozen=True)
class PublishResult:
    """Where a published message was stored, once durable (on S3 and committed)."""

    message_id: str
    offset: int
    partition: int
    timestamp: datetime
    latency_ms: int
    idempotency_key: str | None

    @classmethod
    def from_wire(cls, body: dict[str, Any], idempotency_key: str | None) -> PublishResult:
        """Build from the API's JSON."""
        return cls(
            body["messageId"],
            body["offset"],
            body["partition"],
            parse_time(body["timestamp"]),
            body["latency"],
            idempotency_key,
        )


@dataclass(frozen=True)
class BatchItem:
    """One message of a batch, in request order."""

    message_id: str
    offset: int
    partition: int
    timestamp: datetime | None = None  # None from a server that does not send it


@dataclass(frozen=True)
class BatchResult:
    """A batch committed as one: all of its messages were stored, or none."""

    count: int
    latency_ms: int
    results: list[BatchItem]

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> BatchResult:
        """Build from the API's JSON."""
        items = [
            BatchItem(r["messageId"], r["offset"], r["partition"], _maybe_time(r.get("timestamp")))
            for r in body["results"]
        ]
        return cls(body["count"], body["latency"], items)


@dataclass(frozen=True)
class GroupSummary:
    """One consumer group of a topic: live consumers, total lag, dead-letter queue depth."""

    name: str
    consumers: int
    lag: int
    dead_letters: int


@dataclass(frozen=True)
class PartitionState:
    """A partition in a group: its owner (member id), committed offset and lag."""

    id: int
    consumer: str | None
    offset: int
    lag: int


@dataclass(frozen=True)
class Member:
    """A member (consumer) of a group."""

    id: str
    client_id: str
    generation_id: int
    last_heartbeat_at: datetime


@dataclass(frozen=True)
class DeadLetterPolicy:
    """Retries before dead-lettering, the backoff base, the DLQ depth that alerts.

    Given to :meth:`ConsumerGroups.configure`, a field left ``None`` keeps its current value.
    """

    max_retries: int | None = None
    retry_delay: Duration | None = None
    alert_threshold: int | None = None


@dataclass(frozen=True)
class PushSettings:
    """Where a push group's messages go, as the API reports it (the secret only as a hint)."""

    endpoint: str
    max_in_flight: int
    timeout: str
    ordered: bool
    secret_hint: str


@dataclass(frozen=True)
class GroupConfig:
    """A group's settings as the API reports them; ``push`` for a push group."""

    start_from: str
    ack_timeout: str
    max_in_flight: int
    session_timeout: str
    dead_letter: DeadLetterPolicy
    push: PushSettings | None = None
    fairness: Fairness | None = None  # set when the group is fair
    on_failure: str | None = None  # the group's Lua hook, when it has one


@dataclass(frozen=True)
class Fairness:
    """A fair group's deficit round robin: weights per fairness key (1-1000), the weight of
    other keys, and the quantum (each turn adds ``quantum * weight`` messages)."""

    weights: dict[str, int] = field(default_factory=dict)
    default_weight: int = 1
    quantum: int = 1

    def wire(self) -> dict[str, Any]:
        """The API's JSON."""
        return {
            "weights": dict(self.weights),
            "defaultWeight": self.default_weight,
            "quantum": self.quantum,
        }


@dataclass(frozen=True)
class KeyStats:
    """A fairness key of a fair group: pending messages (in its look-ahead windows), deficit, weight."""

    key: str
    pending: int
    deficit: int
    weight: int


@dataclass(frozen=True)
class ThrottleStats:
    """A throttle key's token bucket: tokens now, refill rate per second, capacity."""

    key: str
    tokens: float
    rate_per_second: float
    burst: float


@dataclass(frozen=True)
class GroupStats:
    """A group's depth, in flight, consumers, fairness keys, throttle keys and hook failures."""

    depth: int
    in_flight: int
    active_consumers: int
    active_fairness_keys: int
    quantum: int
    per_key: list[KeyStats]
    per_throttle: list[ThrottleStats]
    hook_errors: int

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> GroupStats:
        """Build from the API's JSON."""
        return cls(
            body["depth"],
            body["inFlight"],
            body["activeConsumers"],
            body["activeFairnessKeys"],
            body["quantum"],
            [KeyStats(k["key"], k["pending"], k["deficit"], k["weight"]) for k in body["perKey"]],
            [
                ThrottleStats(t["key"], t["tokens"], t["ratePerSecond"], t["burst"])
                for t in body["perThrottle"]
            ],
            body["hookErrors"],
        )


@dataclass(frozen=True)
class ConfigEntry:
    """A key of the environment's runtime configuration and its value."""

    key: str
    value: str


@dataclass(frozen=True)
class Group:
    """A consumer group: members, partition owners, committed offsets, lag and settings."""

    name: str
    topic: str
    consumers: int
    generation_id: int
    partitions: list[PartitionState]
    members: list[Member]
    config: GroupConfig
    dead_letters: int  # the depth of its dead-letter queue
    raw_config: dict[str, Any] = field(repr=False, default_factory=dict)
    # The push signing secret: only from the configure call that made it (keep it then).
    push_secret: str | None = field(repr=False, default=None)

    @property
    def lag(self) -> int:
        """Messages not yet done, over every partition."""
        return sum(p.lag for p in self.partitions)

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> Group:
        """Build from the API's JSON."""
        return cls(
            name=body["name"],
            topic=body["topic"],
            consumers=body["consumers"],
            generation_id=body["generationId"],
            partitions=[
                PartitionState(p["id"], p["consumer"], p["offset"], p["lag"])
                for p in body["partitions"]
            ],
            members=[
                Member(m["id"], m["clientId"], m["generationId"], parse_time(m["lastHeartbeatAt"]))
                for m in body["members"]
            ],
            config=_group_config(body["config"]),
            dead_letters=body["deadLetters"],
            raw_config=body["config"],
            push_secret=body.get("pushSecret"),
        )


def _group_config(config: dict[str, Any]) -> GroupConfig:
    dead = config.get("deadLetter") or {}
    return GroupConfig(
        start_from=config["startFrom"],
        ack_timeout=config["ackTimeout"],
        max_in_flight=config["maxInFlight"],
        session_timeout=config["sessionTimeout"],
        dead_letter=DeadLetterPolicy(
            dead.get("maxRetries"), dead.get("retryDelay"), dead.get("alertThreshold")
        ),
        push=_push_settings(config.get("push")),
        fairness=_fairness(config.get("fairness")),
        on_failure=config.get("onFailure"),
    )


def _push_settings(push: dict[str, Any] | None) -> PushSettings | None:
    if push is None:
        return None
    return PushSettings(
        push["endpoint"], push["maxInFlight"], push["timeout"], push["ordered"], push["secretHint"]
    )


def _fairness(body: dict[str, Any] | None) -> Fairness | None:
    if body is None:
        return None
    return Fairness(dict(body["weights"]), body["defaultWeight"], body["quantum"])


@dataclass(frozen=True)
class PartitionOffset:
    """A group's committed offset on a partition, the partition's end, and the lag between."""

    partition: int
    current: int
    latest: int
    lag: int

    @classmethod
    def from_wire(cls, body: dict[str, Any], partition: int | None = None) -> PartitionOffset:
        """Build from the API's JSON (a single-partition answer does not repeat the partition)."""
        where = int(body["partition"] if partition is None else partition)
        return cls(where, body["current"], body["latest"], body["lag"])


@dataclass(frozen=True)
class DeadLetter:
    """A message that exhausted its retries: the original, why it failed, when, how often."""

    message_id: str
    topic: str
    partition: int
    offset: int
    data: Any
    key: str | None
    headers: dict[str, str]
    timestamp: datetime
    error: str
    attempts: int
    first_delivered_at: datetime
    dead_at: datetime
    fairness_key: str | None = None
    throttle_keys: list[str] | None = None

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> DeadLetter:
        """Build from the API's JSON."""
        return cls(
            message_id=body["messageId"],
            topic=body["topic"],
            partition=body["partition"],
            offset=body["offset"],
            data=body["data"],
            key=body["key"],
            headers=body["headers"],
            timestamp=parse_time(body["timestamp"]),
            error=body["error"],
            attempts=body["attempts"],
            first_delivered_at=parse_time(body["firstDeliveredAt"]),
            dead_at=parse_time(body["deadAt"]),
            fairness_key=body.get("fairnessKey"),
            throttle_keys=body.get("throttleKeys"),
        )


@dataclass(frozen=True)
class DeadLetterPage:
    """Dead letters oldest first, the queue's depth, and the cursor of the next page."""

    messages: list[DeadLetter]
    depth: int
    next_after: str | None

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> DeadLetterPage:
        """Build from the API's JSON."""
        return cls(
            [DeadLetter.from_wire(m) for m in body["messages"]], body["depth"], body["nextAfter"]
        )


@dataclass(frozen=True)
class PublishBatching:
    """How :meth:`AsyncQueueCore.publish` calls are sent together.

    A topic's pending messages go in one request once ``max_messages`` (at most the API's 1,000)
    or ``max_bytes`` of encoded messages are waiting, or ``linger`` seconds after the first.
    ``max_messages=1`` sends every message on its own.
    """

    linger: float = 0.005
    max_messages: int = 1000
    max_bytes: int = 1_048_576

    def __post_init__(self) -> None:
        if not 0 <= self.linger <= 1:
            raise ValueError("linger must be between 0 and 1 second")
        if not 1 <= self.max_messages <= 1000:
            raise ValueError("max_messages must be between 1 and 1000")
        if self.max_bytes < 1:
            raise ValueError("max_bytes must be positive")


@dataclass(frozen=True)
class FlowControl:
    """What one consumer holds at most, and how long it keeps a lease.

    ``max_messages`` bounds the messages received and not yet settled (buffered or in
    handlers); ``None`` is 10 per handler (``concurrency``). The server never leases the
    consumer more (the member's window). ``max_bytes`` bounds their encoded size. A message's
    lease is extended while it is held, up to ``max_lease_extension`` seconds after it arrived.
    """

    max_messages: int | None = None
    max_bytes: int = 100 * 1024 * 1024
    max_lease_extension: Duration = 3600.0

    def __post_init__(self) -> None:
        if self.max_messages is not None and not 1 <= self.max_messages <= 100_000:
            raise ValueError("max_messages must be between 1 and 100000")
        if self.max_bytes < 1:
            raise ValueError("max_bytes must be positive")

    def window(self, concurrency: int) -> int:
        """Messages held at most with ``concurrency`` handlers."""
        return self.max_messages or min(PREFETCH_PER_HANDLER * concurrency, 100_000)

    @property
    def max_lease_extension_s(self) -> float:
        """``max_lease_extension`` in seconds."""
        return duration_seconds(self.max_lease_extension)


PREFETCH_PER_HANDLER = 10  # messages held per handler when FlowControl.max_messages is None


def duration_seconds(value: Duration) -> float:
    """A duration in seconds: a number as is, a ``timedelta``, or ``"500ms"``/``"30s"``/``"5m"``/``"1h"``."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        for suffix, scale in (
            ("ms", 0.001),
            ("s", 1.0),
            ("m", 60.0),
            ("h", 3600.0),
            ("d", 86400.0),
        ):
            if value.endswith(suffix) and value[: -len(suffix)].replace(".", "", 1).isdigit():
                return float(value[: -len(suffix)]) * scale
    raise ValueError(f"not a duration: {value!r}")
