"""The one Celery application. Task modules live beside their domain and are listed here."""

from __future__ import annotations

import functools
from typing import Any

from celery import Celery, signals

from core import settings
from core.worker import broker_options

TASK_MODULES = [
    "observability.tasks",
    "data_plane.tasks",
    "spark_pipelines.tasks",
    "billing.tasks",
]

# Members are otherwise evicted, and added partitions assigned, only by membership operations on
# their group (see data_plane.groups.service), so this bounds how long a silent member's partitions stay
# stranded (its session timeout, 30 s by default, plus this) and how long added partitions wait
# for an owner. Each run is one scan of the groups, cheap next to the pulls.
SWEEP_GROUPS_S = 5.0
# How late a DLQ alert can be: a group's depth reaches its threshold, and within this (plus the
# time to queue and send) its webhook goes out. One bounded count per group with a threshold.
CHECK_DLQ_ALERTS_S = 10.0
# Lag snapshots once a minute (a run that waited past its minute is dropped: the series has a gap
# the analytics job spans); the job over the last 10 min every 5 min; purge daily (keeps 7 days).
SNAPSHOT_LAG_S = 60.0
RUN_LAG_ANALYTICS_S = 300.0
PURGE_LAG_SNAPSHOTS_S = 86_400.0
# Stored bytes sampled every 5 min (billing.usage.STORAGE_SLOT_S: one sample per slot, so an extra
# run adds nothing); the usage aggregation job recomputes the month every hour.
SAMPLE_STORAGE_S = 300.0
RUN_USAGE_AGGREGATION_S = 3_600.0
# Segment compaction merges blocks older than its minimum age (10 min): every half hour is enough.
RUN_COMPACTION_S = 1_800.0
# The GreptimeDB consumer and usage series (observability.snapshot_series; a no-op when off).
SNAPSHOT_SERIES_S = 60.0
# Invoicing checks hourly whether the previous month may be invoiced (billing.invoicing): a run
# after its invoices are issued finds them and changes nothing.
ISSUE_INVOICES_S = 3_600.0


def create_celery() -> Celery:
    """Celery with Redis as broker and result backend, configured from ``QUEUECORE_REDIS_URL``."""
    redis_url = settings.redis().url
    app = Celery("queuecore", broker=redis_url, backend=redis_url, include=TASK_MODULES)
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        result_expires=3600,
        broker_connection_retry_on_startup=True,
        **broker_options(),
        worker_hijack_root_logger=False,
        timezone="UTC",
        beat_schedule={
            "delete-topic-data": _scheduled("data_plane.delete_topic_data", 60.0),
            "apply-retention": _scheduled("data_plane.apply_retention", 300.0),
            "collect-orphans": _scheduled("data_plane.collect_orphans", 600.0),
            "purge-settled-acks": _scheduled("data_plane.purge_settled_acks", 60.0),
            # A run queued while no worker was up is superseded by the next one.
            "sweep-groups": _scheduled(
                "data_plane.sweep_groups", SWEEP_GROUPS_S, expires=SWEEP_GROUPS_S
            ),
            "check-dlq-alerts": _scheduled(
                "data_plane.check_dlq_alerts", CHECK_DLQ_ALERTS_S, expires=CHECK_DLQ_ALERTS_S
            ),
            "snapshot-lag": _scheduled(
                "data_plane.snapshot_lag", SNAPSHOT_LAG_S, expires=SNAPSHOT_LAG_S
            ),
            "purge-lag-snapshots": _scheduled(
                "data_plane.purge_lag_snapshots", PURGE_LAG_SNAPSHOTS_S
            ),
            "run-lag-analytics": _scheduled(
                "spark_pipelines.run_lag_analytics",
                RUN_LAG_ANALYTICS_S,
                expires=RUN_LAG_ANALYTICS_S,
            ),
            "sample-storage": _scheduled(
                "billing.sample_storage", SAMPLE_STORAGE_S, expires=SAMPLE_STORAGE_S
            ),
            "run-usage-aggregation": _scheduled(
                "spark_pipelines.run_usage_aggregation",
                RUN_USAGE_AGGREGATION_S,
                expires=RUN_USAGE_AGGREGATION_S,
            ),
            "run-compaction": _scheduled(
                "spark_pipelines.run_compaction", RUN_COMPACTION_S, expires=RUN_COMPACTION_S
            ),
            "snapshot-series": _scheduled(
                "observability.snapshot_series", SNAPSHOT_SERIES_S, expires=SNAPSHOT_SERIES_S
            ),
            "issue-invoices": _scheduled(
                "billing.issue_invoices", ISSUE_INVOICES_S, expires=ISSUE_INVOICES_S
            ),
        },
    )
    from observability import task_metrics

    task_metrics.connect()
    return app


def _scheduled(task: str, every_s: float, **options: Any) -> dict[str, Any]:
    """A beat entry. Nobody reads a scheduled run's result (the tasks log their reports), so
    none is stored: the 5 s group sweep alone would keep ~720 result keys in Redis."""
    return {"task": task, "schedule": every_s, "options": {"ignore_result": True, **options}}


@functools.cache
def celery_app() -> Celery:
    """The process's Celery application, built on first use (importing reads no settings)."""
    return create_celery()


@signals.setup_logging.connect
def _setup_logging(**_: Any) -> None:
    """Celery processes log through the same structured configuration as the API."""
    from observability import logging as qc_logging

    qc_logging.configure(settings.logs())


@signals.task_prerun.connect
def _bind_task_context(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    """Every log line of a task carries its id and name."""
    from observability import logging as qc_logging

    qc_logging.clear()
    qc_logging.bind(task_id=task_id, task=getattr(task, "name", None))


@signals.worker_process_init.connect
def _start_telemetry(**_: Any) -> None:
    """Each pool process exports on its own, set up after the fork (exporter threads do not
    survive one, and every process needs its own ``service.instance.id``)."""
    from observability import telemetry

    telemetry.setup(settings.telemetry(), role="worker")


@signals.worker_process_shutdown.connect
def _stop_telemetry(**_: Any) -> None:
    """Flush what the pool process buffered before it exits (telemetry, GreptimeDB rows)."""
    from observability import series, telemetry

    telemetry.shutdown()
    series.close_writer()
