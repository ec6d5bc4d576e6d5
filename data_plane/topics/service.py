"""Topics: names, retention, partitions and tier quotas, within one environment.

Every function takes an open ``psycopg.AsyncConnection`` and runs inside the caller's
transaction, and every query is filtered by the caller's environment: another environment's
topic is simply not found.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.db import Conn
from core.errors import ValidationFailed
from data_plane.errors import (
    PartitionsCannotShrink,
    QuotaExceeded,
    TopicExists,
    TopicLimitReached,
    TopicNotFound,
)
from data_plane.topics import queries as q
from tenants import service as tenants
from tenants.ids import new_id
from tenants.models import Organisation

MAX_NAME_LENGTH = 249
MAX_PARTITIONS = 4096  # the schema's ceiling, whatever the tier
_NAME_SEGMENT = re.compile(r"[A-Za-z0-9_-]+")
RETENTION_PATTERN = r"^[1-9][0-9]{0,8}[dhm]$"  # the OpenAPI document says the same
NAME_PATTERN = r"^[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*$"
_RETENTION = re.compile(RETENTION_PATTERN)
_UNIT_S = {"d": 86_400, "h": 3_600, "m": 60}
DELIVERIES = ("exactly-once", "at-least-once")
LATENCY_CLASSES = ("express", "standard")


@dataclass(frozen=True, slots=True)
class Topic:
    """A topic of one environment."""

    id: str
    organisation_id: str
    environment_id: str
    name: str
    partitions: int
    retention_s: int
    delivery: str
    latency_class: str
    status: str
    created_at: datetime
    updated_at: datetime

    @property
    def retention(self) -> str:
        """Retention in the API's notation (``7d``, ``12h``, ``90m``)."""
        return format_retention(self.retention_s)


def _topic(row: dict[str, Any]) -> Topic:
    return Topic(**row)


def validate_name(name: str) -> str:
    """Dot-separated segments of letters, digits, ``_`` and ``-``; 1 to 249 characters."""
    if not 1 <= len(name) <= MAX_NAME_LENGTH:
        raise ValidationFailed(
            f"name: must be 1 to {MAX_NAME_LENGTH} characters, got {len(name)}", field="name"
        )
    for segment in name.split("."):
        if not segment:
            raise ValidationFailed(
                f"name: '{name}' has an empty segment; use dots only between segments",
                field="name",
            )
        if not _NAME_SEGMENT.fullmatch(segment):
            raise ValidationFailed(
                f"name: '{name}' may contain only letters, digits, '_', '-' and '.' "
                "(dots separate namespaces)",
                field="name",
            )
    return name


def parse_retention(text: str) -> int:
    """``"30d"``, ``"12h"`` or ``"90m"`` → seconds (positive; no sign, space or leading zero)."""
    match = _RETENTION.fullmatch(text)
    if match is None:
        raise ValidationFailed(
            f"retention: '{text}' is not a positive duration such as '7d', '12h' or '90m' "
            "(units d, h, m)",
            field="retention",
        )
    return int(text[:-1]) * _UNIT_S[text[-1]]


def format_retention(seconds: int) -> str:
    """Seconds → the largest whole unit (``86400`` → ``1d``)."""
    for unit in ("d", "h"):
        if seconds % _UNIT_S[unit] == 0:
            return f"{seconds // _UNIT_S[unit]}{unit}"
    return f"{seconds // 60}m"


def _check_partitions(partitions: int, organisation: Organisation) -> None:
    if partitions < 1:
        raise ValidationFailed(
            f"partitions: must be at least 1, got {partitions}", field="partitions"
        )
    limit = min(organisation.limits.max_partitions, MAX_PARTITIONS)
    if partitions > limit:
        raise QuotaExceeded(
            "partitions",
            f"{partitions} partitions",
            str(limit),
            partitions,
            limit,
            organisation.tier,
        )


def _check_retention(retention_s: int, organisation: Organisation) -> None:
    limit = organisation.limits.max_retention_s
    if retention_s > limit:
        raise QuotaExceeded(
            "retention",
            f"a retention of {format_retention(retention_s)}",
            format_retention(limit),
            retention_s,
            limit,
            organisation.tier,
        )


def _check_choice(field: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValidationFailed(f"{field}: must be one of {', '.join(choices)}", field=field)


async def create_topic(
    conn: Conn,
    organisation_id: str,
    environment_id: str,
    name: str,
    *,
    partitions: int = 3,
    retention: str = "7d",
    delivery: str = "exactly-once",
    latency_class: str = "express",
) -> Topic:
    """A new active topic with its partitions, within the tier's quotas."""
    validate_name(name)
    retention_s = parse_retention(retention)
    _check_choice("delivery", delivery, DELIVERIES)
    _check_choice("latencyClass", latency_class, LATENCY_CLASSES)
    organisation = await tenants.get_organisation(conn, organisation_id)
    _check_partitions(partitions, organisation)
    _check_retention(retention_s, organisation)
    # Serialise creations per environment so the topic quota holds under concurrency.
    await conn.execute(q.LOCK_ENVIRONMENT_TOPICS, {"environment_id": environment_id})
    await _check_topic_quota(conn, environment_id, organisation)
    row = await (
        await conn.execute(
            q.INSERT_TOPIC,
            {
                "id": new_id("top"),
                "organisation_id": organisation_id,
                "environment_id": environment_id,
                "name": name,
                "partitions": partitions,
                "retention_s": retention_s,
                "delivery": delivery,
                "latency_class": latency_class,
            },
        )
    ).fetchone()
    if row is None:
        raise TopicExists(name)
    topic = _topic(row)
    await _add_partitions(conn, topic.id, 0, partitions)
    return topic


async def _check_topic_quota(conn: Conn, environment_id: str, organisation: Organisation) -> None:
    row = await (
        await conn.execute(q.COUNT_ACTIVE_TOPICS, {"environment_id": environment_id})
    ).fetchone()
    limit = organisation.limits.max_topics
    if row is not None and row["n"] >= limit:
        raise TopicLimitReached(limit, organisation.tier)


async def _add_partitions(conn: Conn, topic_id: str, first: int, count: int) -> None:
    await conn.execute(
        q.INSERT_PARTITIONS, {"topic_id": topic_id, "first": first, "last": count - 1}
    )


async def list_topics(conn: Conn, environment_id: str) -> list[Topic]:
    """The environment's active topics, by name."""
    rows = await (await conn.execute(q.LIST_TOPICS, {"environment_id": environment_id})).fetchall()
    return [_topic(row) for row in rows]


async def get_topic(conn: Conn, environment_id: str, name: str) -> Topic:
    """One active topic by name, or :class:`TopicNotFound`."""
    row = await (
        await conn.execute(q.SELECT_TOPIC, {"environment_id": environment_id, "name": name})
    ).fetchone()
    if row is None:
        raise TopicNotFound(name)
    return _topic(row)


async def update_topic(
    conn: Conn,
    organisation_id: str,
    environment_id: str,
    name: str,
    *,
    partitions: int | None = None,
    retention: str | None = None,
    latency_class: str | None = None,
) -> Topic:
    """Raise the partition count (never lower it), change retention or latency class."""
    row = await (
        await conn.execute(q.LOCK_TOPIC, {"environment_id": environment_id, "name": name})
    ).fetchone()
    if row is None:
        raise TopicNotFound(name)
    topic = _topic(row)
    organisation = await tenants.get_organisation(conn, organisation_id)
    new_partitions = topic.partitions if partitions is None else partitions
    if new_partitions < topic.partitions:
        raise PartitionsCannotShrink(topic.partitions, new_partitions)
    if new_partitions != topic.partitions:
        _check_partitions(new_partitions, organisation)
    retention_s = topic.retention_s if retention is None else parse_retention(retention)
    if retention is not None:
        _check_retention(retention_s, organisation)
    new_class = latency_class or topic.latency_class
    _check_choice("latencyClass", new_class, LATENCY_CLASSES)
    updated = await (
        await conn.execute(
            q.UPDATE_TOPIC,
            {
                "id": topic.id,
                "partitions": new_partitions,
                "retention_s": retention_s,
                "latency_class": new_class,
            },
        )
    ).fetchone()
    assert updated is not None
    await _add_partitions(conn, topic.id, topic.partitions, new_partitions)
    return _topic(updated)


async def delete_topic(conn: Conn, environment_id: str, name: str) -> Topic:
    """Mark the topic ``deleting``: its name is free at once; a Celery task removes its data."""
    row = await (
        await conn.execute(q.MARK_TOPIC_DELETING, {"environment_id": environment_id, "name": name})
    ).fetchone()
    if row is None:
        raise TopicNotFound(name)
    return _topic(row)
