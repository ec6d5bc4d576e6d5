"""DLQ alerts: the environment's alert endpoint, and the check that raises and re-arms alerts.

When a group's dead-letter depth (its dead letters not replayed) reaches its ``alertThreshold``,
:func:`check_groups` marks the group's alert raised and writes a ``dlq.threshold_reached``
delivery to the webhook outbox in one transaction; the caller queues the delivery after the
commit (:mod:`data_plane.deadletters.webhooks` sends it). The alert re-arms when the depth falls below the
threshold, so each crossing sends one webhook. A group whose environment has no endpoint still
raises and re-arms, without a delivery: an endpoint added later hears of the next crossing, not
of one that happened before it existed (docs/decisions.md §24).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import msgspec
import psycopg

from core.errors import NotFound, ValidationFailed
from data_plane.deadletters import queries as q
from data_plane.deadletters.alert_schemas import DlqThresholdReached
from data_plane.deadletters.endpoint_urls import BadEndpointUrl, canonical_url
from data_plane.deadletters.webhooks import literal_refusal
from data_plane.groups.service import Conn, dead_letter_depth
from data_plane.read.schemas import iso_timestamp
from observability.logging import get_logger
from tenants.ids import new_id, random_base62

SECRET_PREFIX = "whsec_"  # noqa: S105 (the prefix of every secret, not one)
SECRET_LENGTH = 32
DLQ_THRESHOLD_REACHED = "dlq.threshold_reached"
STALE_DELIVERY_S = 120.0  # a pending delivery this far past its due time lost its queued task
REQUEUE_LIMIT = 100
log = get_logger("queuecore.alerts")


class AlertEndpointNotFound(NotFound):
    """The caller's environment has no alert endpoint."""

    code = "ALERT_ENDPOINT_NOT_FOUND"

    def __init__(self) -> None:
        super().__init__(
            "No alert endpoint is configured for this environment; "
            "set one with PUT /v1/alerts/endpoint."
        )


@dataclass(frozen=True, slots=True)
class AlertEndpoint:
    """An environment's alert endpoint; ``secret`` only when this call made it."""

    url: str
    secret_hint: str
    created_at: datetime
    updated_at: datetime
    secret_created_at: datetime
    secret: str | None = None

    @classmethod
    def of(cls, row: dict[str, Any], *, reveal: bool = False) -> AlertEndpoint:
        """From a row of ``alert_endpoints``."""
        return cls(
            url=row["url"],
            secret_hint=secret_hint(row["secret"]),
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            secret_created_at=row["secret_created_at"],
            secret=row["secret"] if reveal else None,
        )


def generate_secret() -> str:
    """A new signing secret: ``whsec_`` and 32 base62 characters."""
    return SECRET_PREFIX + random_base62(SECRET_LENGTH)


def secret_hint(secret: str) -> str:
    """What GET shows of a secret: its prefix and last four characters."""
    return f"{SECRET_PREFIX}…{secret[-4:]}"


def check_url(url: str, allow_private: bool, field: str = "url") -> str:
    """``url`` in its canonical form (:func:`canonical_url`: the rules the delivery applies) if
    it can be an endpoint; with the guard on, its host must not be a private address."""
    try:
        canonical = canonical_url(url)
    except BadEndpointUrl as exc:
        raise ValidationFailed(f"{field}: {exc}", field=field) from None
    refused = None if allow_private else literal_refusal(urlsplit(canonical).hostname or "")
    if refused is not None:
        raise ValidationFailed(f"{field}: {refused}", field=field)
    return canonical


async def get_endpoint(conn: Conn, environment_id: str) -> AlertEndpoint:
    """The environment's endpoint (its secret as a hint only), or ``ALERT_ENDPOINT_NOT_FOUND``."""
    params = {"environment_id": environment_id}
    row = await (await conn.execute(q.SELECT_ENDPOINT, params)).fetchone()
    if row is None:
        raise AlertEndpointNotFound
    return AlertEndpoint.of(dict(row))


async def put_endpoint(
    conn: Conn, environment_id: str, url: str, *, rotate_secret: bool, allow_private: bool
) -> AlertEndpoint:
    """Create or update the endpoint; a new secret (shown in the result) on creation or rotation."""
    candidate = generate_secret()
    params = {
        "environment_id": environment_id,
        "url": check_url(url, allow_private),
        "secret": candidate,
        "rotate": rotate_secret,
    }
    row = await (await conn.execute(q.UPSERT_ENDPOINT, params)).fetchone()
    assert row is not None
    fresh = row["secret"] == candidate
    log.info("alert_endpoint_set", environment_id=environment_id, new_secret=fresh)
    return AlertEndpoint.of(dict(row), reveal=fresh)


async def rotate_secret(conn: Conn, environment_id: str, *, allow_private: bool) -> AlertEndpoint:
    """A new signing secret for the environment's endpoint (shown in the result), same URL."""
    current = await get_endpoint(conn, environment_id)
    return await put_endpoint(
        conn, environment_id, current.url, rotate_secret=True, allow_private=allow_private
    )


async def delete_endpoint(conn: Conn, environment_id: str) -> None:
    """Remove the endpoint: alerts of the environment are no longer sent."""
    params = {"environment_id": environment_id}
    if await (await conn.execute(q.DELETE_ENDPOINT, params)).fetchone() is None:
        raise AlertEndpointNotFound
    log.info("alert_endpoint_deleted", environment_id=environment_id)


@dataclass(slots=True)
class CheckReport:
    """What one run of the check did; ``to_send`` are the deliveries to queue after it."""

    groups_checked: int = 0
    alerts_raised: int = 0
    alerts_rearmed: int = 0
    to_send: list[str] = field(default_factory=list)
    requeued: int = 0

    def as_dict(self) -> dict[str, int]:
        """JSON-friendly (a Celery task result)."""
        return {
            "groupsChecked": self.groups_checked,
            "alertsRaised": self.alerts_raised,
            "alertsRearmed": self.alerts_rearmed,
            "deliveriesQueued": len(self.to_send),
            "deliveriesRequeued": self.requeued,
        }


async def check_groups(conn: Conn, group_id: str | None = None) -> CheckReport:
    """Raise the alert of each group whose depth reached its threshold; re-arm those below it.

    Each group is decided in its own transaction under its row lock, so several runs at once
    raise a crossing once, and a second run finds nothing to do. Without ``group_id`` it also
    requeues outbox rows whose queued task was lost. Needs an autocommit connection.
    """
    if not conn.autocommit:
        raise ValueError("the check commits group by group: pass an autocommit connection")
    rows = await (await conn.execute(q.GROUPS_TO_CHECK, {"group_id": group_id})).fetchall()
    report = CheckReport(groups_checked=len(rows))
    for row in rows:
        await _check_one(conn, row["id"], report)
    if group_id is None:
        stale = await requeue_stale(conn)
        report.to_send += stale
        report.requeued = len(stale)
    return report


async def _check_one(conn: Conn, group_id: str, report: CheckReport) -> None:
    """One group in its own transaction; a failure is left to the next run."""
    try:
        async with conn.transaction():
            verdict, delivery_id = await _decide(conn, group_id)
    except psycopg.Error as exc:
        log.warning("dlq_alert_check_failed", group_id=group_id, error=type(exc).__name__)
        return
    report.alerts_raised += verdict == "raised"
    report.alerts_rearmed += verdict == "rearmed"
    if delivery_id is not None:
        report.to_send.append(delivery_id)


async def _decide(conn: Conn, group_id: str) -> tuple[str, str | None]:
    """Under the group's lock: ``raised`` (with its delivery, if any), ``rearmed`` or ``unchanged``."""
    params = {"group_id": group_id}
    group = await (await conn.execute(q.LOCK_ALERT_GROUP, params)).fetchone()
    if group is None:  # held by another check or a membership change, or deleted: next run
        return "unchanged", None
    depth = await dead_letter_depth(conn, group_id)
    threshold, raised = group["alert_threshold"], group["dlq_alert_raised_at"] is not None
    if threshold is not None and depth >= threshold and not raised:
        return "raised", await _raise(conn, dict(group), depth)
    if raised and (threshold is None or depth < threshold):
        await conn.execute(q.REARM_ALERT, params)
        log.info("dlq_alert_rearmed", group_id=group_id, depth=depth, threshold=threshold)
        return "rearmed", None
    return "unchanged", None


async def _raise(conn: Conn, group: dict[str, Any], depth: int) -> str | None:
    """Mark the alert raised and, when the environment has an endpoint, write its delivery."""
    await conn.execute(q.RAISE_ALERT, {"group_id": group["id"]})
    environment = {"environment_id": group["environment_id"]}
    has_endpoint = await (await conn.execute(q.ENDPOINT_EXISTS, environment)).fetchone()
    delivery_id = new_id("whd") if has_endpoint else None
    if delivery_id is not None:
        payload = _payload(delivery_id, group, depth)
        await conn.execute(
            q.INSERT_DELIVERY,
            {
                **environment,
                "id": delivery_id,
                "event": DLQ_THRESHOLD_REACHED,
                "payload": msgspec.json.encode(payload).decode(),
            },
        )
    log.info(
        "dlq_alert_raised",
        group_id=group["id"],
        depth=depth,
        threshold=group["alert_threshold"],
        delivery_id=delivery_id,
    )
    return delivery_id


def _payload(delivery_id: str, group: dict[str, Any], depth: int) -> DlqThresholdReached:
    return DlqThresholdReached(
        id=delivery_id,
        event=DLQ_THRESHOLD_REACHED,
        timestamp=iso_timestamp(int(time.time() * 1000)),
        environment_id=group["environment_id"],
        topic=group["topic"],
        group=group["name"],
        depth=depth,
        threshold=group["alert_threshold"],
    )


async def requeue_stale(conn: Conn, stale_s: float = STALE_DELIVERY_S) -> list[str]:
    """Pending deliveries long past due (their queued task was lost): their ids, to queue again."""
    params = {"stale_s": stale_s, "limit": REQUEUE_LIMIT}
    rows = await (await conn.execute(q.REQUEUE_STALE_DELIVERIES, params)).fetchall()
    return [row["id"] for row in rows]
