"""The typed results of topic and group administration, built from the stores' rows."""

from __future__ import annotations

from typing import Any

from data_plane.groups import service as groups
from data_plane.groups.schemas import GroupConfigRequest, GroupView, MemberView, PartitionState
from data_plane.push import config as push_config
from data_plane.topics.schemas import TopicView
from data_plane.topics.service import Topic


def topic_view(topic: Topic, on_enqueue: str | None = None) -> TopicView:
    """A topic as the API shows it (with its ``onEnqueue`` hook when given)."""
    return TopicView(
        id=topic.id,
        name=topic.name,
        partitions=topic.partitions,
        retention=topic.retention,
        delivery=topic.delivery,  # type: ignore[arg-type]
        latency_class=topic.latency_class,  # type: ignore[arg-type]
        status=topic.status,  # type: ignore[arg-type]
        created_at=topic.created_at,
        on_enqueue=on_enqueue,
    )


def group_config(data: GroupConfigRequest) -> groups.GroupConfig:
    """A group's settings from its request: durations read and checked against their bounds."""
    dead = data.dead_letter
    return groups.GroupConfig(
        start_from=data.start_from,
        ack_timeout_ms=groups.parse_duration_ms(
            data.ack_timeout, "ackTimeout", groups.ACK_TIMEOUT_MS
        ),
        max_in_flight=data.max_in_flight,
        max_retries=dead.max_retries if dead else 5,
        retry_delay_ms=groups.parse_duration_ms(
            dead.retry_delay, "deadLetter.retryDelay", groups.RETRY_DELAY_MS
        )
        if dead
        else 30_000,
        alert_threshold=dead.alert_threshold if dead else None,
        session_timeout_ms=groups.parse_duration_ms(
            data.session_timeout, "sessionTimeout", groups.SESSION_TIMEOUT_MS
        ),
    )


def group_view(state: dict[str, Any]) -> GroupView:
    """A group as the API shows it, from :func:`data_plane.groups.service.describe`'s state."""
    group = state["group"]
    partitions = [
        PartitionState(
            id=row["partition"],
            consumer=row["owner_member_id"],
            offset=row["committed_offset"],
            lag=max(row["next_offset"] - row["committed_offset"], 0),
        )
        for row in state["partitions"]
    ]
    members = [
        MemberView(
            id=m["id"],
            client_id=m["client_id"],
            generation_id=m["generation"],
            last_heartbeat_at=m["last_heartbeat_at"].isoformat(),
        )
        for m in state["members"]
    ]
    config = {
        "startFrom": group["start_from"],
        "ackTimeout": groups.format_duration_ms(group["ack_timeout_ms"]),
        "maxInFlight": group["max_in_flight"],
        "sessionTimeout": groups.format_duration_ms(group["session_timeout_ms"]),
        "deadLetter": {
            "maxRetries": group["max_retries"],
            "retryDelay": groups.format_duration_ms(group["retry_delay_ms"]),
            "alertThreshold": group["alert_threshold"],
        },
        "push": push_config.view(state.get("push")),
        **state.get("extras", {}),  # fairness and onFailure (data_plane.groups.fairness)
    }
    return GroupView(
        name=group["name"],
        topic=state["topic"]["name"],
        consumers=len(members),
        generation_id=state["generation"],
        partitions=partitions,
        members=members,
        config=config,
        dead_letters=state["dead_letters"],
    )
