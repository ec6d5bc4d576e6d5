"""Wire shapes of consumer groups (camelCase JSON)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from core.wire_types import BIGINT_MAX, Text, duration_json_schema
from data_plane.groups.fairness import FairnessConfig, OnFailureSource
from data_plane.groups.push_schemas import PushConfigRequest
from data_plane.groups.service import ACK_TIMEOUT_MS, RETRY_DELAY_MS, SESSION_TIMEOUT_MS

# Plain types: parse_duration_ms checks them (its messages are friendlier than a pattern's); the
# OpenAPI document says what it accepts, from the same bounds.
Duration = str | int
AckTimeout = Annotated[
    Duration, msgspec.Meta(extra_json_schema=duration_json_schema(*ACK_TIMEOUT_MS))
]
SessionTimeout = Annotated[
    Duration, msgspec.Meta(extra_json_schema=duration_json_schema(*SESSION_TIMEOUT_MS))
]
RetryDelay = Annotated[
    Duration, msgspec.Meta(extra_json_schema=duration_json_schema(*RETRY_DELAY_MS))
]
Window = Annotated[
    int,
    msgspec.Meta(
        ge=1,
        le=100_000,
        description=(
            "The member's window: the most messages it holds leased and unsettled at once. A "
            "pull or stream never leases it more than the smaller of this and the group's "
            "maxInFlight."
        ),
    ),
]


class DeadLetterConfig(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """Retries before a message is dead-lettered, the base of the exponential backoff, the alert level."""

    max_retries: Annotated[int, msgspec.Meta(ge=0, le=1000)] = 5
    retry_delay: RetryDelay = "30s"
    alert_threshold: Annotated[int, msgspec.Meta(ge=1, le=BIGINT_MAX)] | None = None


class GroupConfigRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``PUT /v1/topics/{topic}/groups/{group}``."""

    start_from: Literal["earliest", "latest"] = "latest"
    ack_timeout: AckTimeout = "30s"
    max_in_flight: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 1000
    session_timeout: SessionTimeout = "30s"
    dead_letter: DeadLetterConfig | None = None
    # Absent: push stays as it is; null: push off (docs/push.md).
    push: (
        Annotated[
            PushConfigRequest | None,
            msgspec.Meta(
                description=(
                    "Deliver the group to an HTTPS endpoint (a push group); null turns push off, "
                    "absent leaves it as it is"
                )
            ),
        ]
        | msgspec.UnsetType
    ) = msgspec.UNSET
    # Fair scheduling (data_plane/groups/fairness.py): absent keeps the group's, null turns off.
    fairness: FairnessConfig | msgspec.UnsetType | None = msgspec.UNSET
    on_failure: OnFailureSource | msgspec.UnsetType | None = msgspec.UNSET


class JoinRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``POST …/groups/{group}/members``: a new member, or a rejoin with ``memberId``."""

    member_id: Text | None = None
    client_id: Annotated[Text, msgspec.Meta(max_length=200)] = ""
    session_timeout: SessionTimeout | None = None
    max_in_flight: Window | None = None  # the member's own window; a rejoin without it keeps it


class JoinResponse(msgspec.Struct, rename="camel"):
    """A member's identity, generation and partitions."""

    member_id: str
    generation_id: int
    assignments: list[int]
    heartbeat_interval_ms: int
    session_timeout_ms: int
    max_in_flight: int  # the member's window: the smaller of the group's and its own
    ack_timeout_ms: int  # how long a delivered message stays leased unless extended
    delivery: str  # the topic's: "exactly-once" refuses an ack once its lease expired


class HeartbeatRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``POST …/members/{memberId}/heartbeat`` (the body is optional)."""

    max_in_flight: Window | None = None  # a new window for the member, e.g. while it is full


class HeartbeatResponse(msgspec.Struct, rename="camel"):
    """Whether the member must rejoin to learn a new assignment."""

    generation_id: int
    should_rejoin: bool
    ack_timeout_ms: int  # the group's current ack timeout


class GroupSummary(msgspec.Struct, rename="camel"):
    """One entry of ``GET /v1/topics/{topic}/groups``."""

    name: str
    consumers: int
    lag: int
    dead_letters: int  # the depth of its dead-letter queue


class PartitionState(msgspec.Struct, rename="camel"):
    """A partition's owner, committed offset and lag in a group."""

    id: int
    consumer: str | None
    offset: int
    lag: int


class MemberView(msgspec.Struct, rename="camel"):
    """A member of a group."""

    id: str
    client_id: str
    generation_id: int
    last_heartbeat_at: str


class GroupView(msgspec.Struct, rename="camel"):
    """``GET /v1/topics/{topic}/groups/{group}``."""

    name: str
    topic: str
    consumers: int
    generation_id: int
    partitions: list[PartitionState]
    members: list[MemberView]
    config: Annotated[
        dict[str, Any],
        msgspec.Meta(
            description=(
                "startFrom, ackTimeout, maxInFlight, sessionTimeout, deadLetter {maxRetries, "
                "retryDelay, alertThreshold}, and push {endpoint, maxInFlight, timeout, ordered, "
                "secretHint} (null for a group that is not a push group)"
            )
        ),
    ]
    dead_letters: int  # the depth of its dead-letter queue
    # The push signing secret, only in the answer of the PUT that made it (docs/push.md).
    push_secret: (
        Annotated[
            str,
            msgspec.Meta(
                description=(
                    "The push signing secret (whsec_…): only in the answer of the PUT that turned "
                    "push on or rotated it"
                )
            ),
        ]
        | msgspec.UnsetType
    ) = msgspec.UNSET
