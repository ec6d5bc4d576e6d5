"""A real Celery worker process executes QueueCore tasks through Redis."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

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
