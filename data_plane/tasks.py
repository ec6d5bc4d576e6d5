"""Celery tasks of the data plane: topic deletion, orphan GC, retention, member eviction,
ack tombstones, DLQ alerts and their webhook deliveries, lag snapshots and their purge.

Each task is a thin shell: it calls the data plane's background work through its door
(:class:`data_plane.service.Upkeep`, which opens its own connection from the same settings the
API uses) with ``asyncio.run`` and returns the report, so the API, the CLI and the worker execute
one code path. Every task is idempotent and safe to run on several workers at once (row locks
serialise them); beat schedules them in ``infra.celery_app``.

The storage maintenance tasks (topic deletion, orphan GC, retention) are retried with an
exponential backoff (5 s doubling to 5 min, jittered, 8 times) when PostgreSQL or S3 fails
them, so a run an outage cut short is done once the service is back rather than skipped until
the next beat (docs/faults.md).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import psycopg
from botocore.exceptions import BotoCoreError, ClientError
from celery import Task, shared_task

from core import settings
from core.db import Connector
from core.object_store import ObjectStore
from data_plane.service import SETTLED_ACK_GRACE_S, SNAPSHOT_KEEP_S, Upkeep
from observability.logging import get_logger
from observability.object_store import metered_store

Report = TypeVar("Report")
DELIVER_WEBHOOK = "data_plane.deliver_webhook"
log = get_logger("queuecore.tasks")
# A service that failed or stalled (S3 through boto3 or our client, PostgreSQL), not a bug.
OUTAGES = (OSError, psycopg.OperationalError, BotoCoreError, ClientError)
RETRIED_ON_OUTAGE: dict[str, Any] = {
    "autoretry_for": OUTAGES,
    "retry_backoff": 5,
    "retry_backoff_max": 300,
    "retry_jitter": True,
    "max_retries": 8,
}


@functools.cache
def _object_store() -> ObjectStore:
    """One S3 client per worker process (boto3 clients are thread-safe and costly to build)."""
    return metered_store(settings.object_store())


def run(work: Callable[[Upkeep], Coroutine[Any, Any, Report]]) -> Report:
    """Run ``work`` on the data plane's background-work door, to completion."""
    upkeep = Upkeep(Connector(settings.database().url), _object_store(), settings.webhooks())
    return asyncio.run(work(upkeep))


@shared_task(name="data_plane.delete_topic_data", **RETRIED_ON_OUTAGE)
def delete_topic_data(topic_id: str | None = None) -> dict[str, int]:
    """Remove deleted topics' index rows, partitions, idempotency keys, rows and objects."""
    return run(lambda upkeep: upkeep.delete_topic_data(topic_id)).as_dict()


@shared_task(name="data_plane.collect_orphans", **RETRIED_ON_OUTAGE)
def collect_orphans(grace_s: int | None = None) -> dict[str, int]:
    """Delete segment objects never committed or no longer referenced, older than the grace."""
    grace = settings.orphan_grace_s() if grace_s is None else grace_s
    return run(lambda upkeep: upkeep.collect_orphans(grace)).as_dict()


@shared_task(name="data_plane.apply_retention", **RETRIED_ON_OUTAGE)
def apply_retention() -> dict[str, int]:
    """Drop messages past their topic's retention and the objects left unreferenced."""
    return run(lambda upkeep: upkeep.apply_retention()).as_dict()


@shared_task(name="data_plane.sweep_groups")
def sweep_groups(topic_id: str | None = None) -> dict[str, int]:
    """Evict silent group members and assign partitions added to topics, in every group."""
    return run(lambda upkeep: upkeep.sweep_groups(topic_id)).as_dict()


@shared_task(name="data_plane.purge_settled_acks")
def purge_settled_acks(grace_s: float = SETTLED_ACK_GRACE_S) -> dict[str, int]:
    """Delete the tombstones of acks settled more than ten minutes ago (kept for repeated acks)."""
    return {"settledAcksPurged": run(lambda upkeep: upkeep.purge_settled_acks(grace_s))}


@shared_task(name="data_plane.check_dlq_alerts")
def check_dlq_alerts(group_id: str | None = None) -> dict[str, int]:
    """Raise the DLQ alert of groups whose depth reached the threshold, re-arm those below it."""
    report = run(lambda upkeep: upkeep.check_dlq_alerts(group_id))
    for delivery_id in report.to_send:
        queue_delivery(delivery_id)
    return report.as_dict()


def queue_delivery(delivery_id: str) -> None:
    """Queue a webhook delivery; if the broker is down the check requeues it later (outbox)."""
    try:
        deliver_webhook.apply_async(args=(delivery_id,), ignore_result=True)
    except Exception as exc:
        log.warning("webhook_not_queued", delivery_id=delivery_id, error=type(exc).__name__)


@shared_task(name=DELIVER_WEBHOOK, bind=True, max_retries=None, ignore_result=True)
def deliver_webhook(self: Task[Any, Any], delivery_id: str) -> dict[str, Any]:
    """POST one outbox delivery; retried with exponential backoff until 2xx or the attempt cap."""
    outcome = run(lambda upkeep: upkeep.deliver_webhook(delivery_id))
    if outcome.retry_in_s is not None:
        raise self.retry(countdown=outcome.retry_in_s)
    return outcome.as_dict()


@shared_task(name="data_plane.snapshot_lag")
def snapshot_lag(topic_id: str | None = None) -> dict[str, int]:
    """Record this minute's lag of every group and partition (once a minute, however often run)."""
    return {"snapshotsRecorded": run(lambda upkeep: upkeep.snapshot_lag(topic_id))}


@shared_task(name="data_plane.purge_lag_snapshots")
def purge_lag_snapshots(keep_s: float = SNAPSHOT_KEEP_S) -> dict[str, int]:
    """Delete lag snapshots and series points older than ``keep_s`` (seven days by default)."""
    return run(lambda upkeep: upkeep.purge_lag_snapshots(keep_s)).as_dict()
