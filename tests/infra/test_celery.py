"""A real Celery worker process executes QueueCore tasks through Redis."""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

import redis

from core import settings
from infra.celery_app import celery_app
from tests.support.services import Services


def test_ping_round_trip_through_a_worker_process(celery_worker: Path) -> None:
    token = secrets.token_hex(8)
    result = celery_app().send_task("queuecore.ping", args=[token]).get(timeout=30)
    assert result["token"] == token
    assert not result["worker"].endswith(f":{os.getpid()}")


def test_registered_tasks_include_the_domain_modules(services: Services) -> None:
    app = celery_app()
    app.loader.import_default_modules()
    assert "queuecore.ping" in app.tasks


def test_every_scheduled_task_is_registered(services: Services) -> None:
    # A worker drops a task it does not know, so a misspelt beat entry would otherwise pass below.
    app = celery_app()
    app.loader.import_default_modules()
    scheduled = {entry["task"] for entry in app.conf.beat_schedule.values()}
    assert {
        "data_plane.snapshot_lag",
        "spark_pipelines.run_lag_analytics",
        "billing.sample_storage",
        "spark_pipelines.run_usage_aggregation",
        "spark_pipelines.run_compaction",
    } <= scheduled
    assert scheduled - set(app.tasks) == set()


# Arguments that make each scheduled task a no-op on the shared test database.
HARMLESS: dict[str, dict[str, object]] = {
    "data_plane.delete_topic_data": {"topic_id": "no-such-topic"},
    "data_plane.sweep_groups": {"topic_id": "no-such-topic"},
    "data_plane.collect_orphans": {"grace_s": 10**9},
    "data_plane.purge_settled_acks": {"grace_s": 10**9},
    "data_plane.check_dlq_alerts": {"group_id": "no-such-group"},
    "data_plane.snapshot_lag": {"topic_id": "no-such-topic"},
    "data_plane.purge_lag_snapshots": {"keep_s": 10**9},
    # A window without snapshots: the task returns before starting Spark.
    "spark_pipelines.run_lag_analytics": {
        "since": "2000-01-01T00:00:00+00:00",
        "until": "2000-01-01T00:10:00+00:00",
    },
    "billing.sample_storage": {"environment_id": "no-such-environment"},
    # A month without usage: the task returns before starting Spark.
    "spark_pipelines.run_usage_aggregation": {"month": "2000-01"},
    # No block is 30 years old: the task returns before starting Spark.
    "spark_pipelines.run_compaction": {"min_age_s": 10**9},
}


def test_scheduled_runs_leave_no_result_in_redis(celery_worker: Path) -> None:
    app = celery_app()
    store = redis.Redis.from_url(settings.redis().url)
    for name, entry in app.conf.beat_schedule.items():
        sent = app.send_task(
            entry["task"], kwargs=HARMLESS.get(entry["task"], {}), **entry.get("options", {})
        )
        # A task sent after it, with a stored result, shows the worker has taken both.
        assert app.send_task("queuecore.ping", args=["after"]).get(timeout=30)["token"] == "after"
        time.sleep(0.5)
        assert not store.exists(f"celery-task-meta-{sent.id}"), name
