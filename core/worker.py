"""What every Celery task shares: the broker's bounded waits, and a task producer.

Task modules live beside their domain (``data_plane/tasks.py``, ``billing/tasks.py``, …) and are
thin shells around the domain's service, built on fresh autocommit connections
(``core.db.Connector``) from the same settings the API uses, so the API, the CLI and the worker
execute one code path.
"""

from __future__ import annotations

import functools
from typing import Any

from celery import Celery

from core import settings

BROKER_TIMEOUT_S = 5


def broker_options() -> dict[str, Any]:
    """Celery settings that bound every wait on Redis (broker and results) and the publish retries.

    Without socket timeouts a frozen Redis (not a dead one: a dead one refuses at once) holds a
    task send, and the thread that makes it, for ever.
    """
    timeouts = {"socket_timeout": BROKER_TIMEOUT_S, "socket_connect_timeout": BROKER_TIMEOUT_S}
    return {
        "broker_transport_options": timeouts,
        "broker_connection_timeout": BROKER_TIMEOUT_S,
        "redis_socket_timeout": BROKER_TIMEOUT_S,
        "redis_socket_connect_timeout": BROKER_TIMEOUT_S,
        "result_backend_transport_options": {"retry_policy": {"max_retries": 2}},
        "task_publish_retry_policy": {
            "max_retries": 2,
            "interval_start": 0,
            "interval_step": 0.5,
            "interval_max": 1,
        },
    }


@functools.cache
def producer() -> Celery:
    """A Celery app that only sends tasks by name, for processes that run no worker (the API).

    It has no result backend: nothing here waits for a result, and a backend would subscribe to
    each task's result channel on send (one more wait on Redis).
    """
    url = settings.redis().url
    app = Celery("queuecore", broker=url, set_as_current=False)
    app.conf.update(broker_options())
    return app


def send_task(name: str, **options: Any) -> None:
    """Queue the task ``name`` (``args``, ``kwargs`` and Celery's options as keywords)."""
    producer().send_task(name, **options)
