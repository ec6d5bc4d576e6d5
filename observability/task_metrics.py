"""Celery task duration and failures, from Celery's signals rather than from task bodies."""

from __future__ import annotations

import time
from typing import Any

from celery import signals

from observability.metrics import ERROR_TYPE, TASK_DURATION, TASK_FAILURES

_started: dict[str, float] = {}  # task id → perf_counter at prerun, in this worker process


def _task_name(task: Any) -> str:
    return str(getattr(task, "name", None) or "unknown")


def _prerun(task_id: str | None = None, **_: Any) -> None:
    if task_id is not None:
        _started[task_id] = time.perf_counter()


def _postrun(
    task_id: str | None = None, task: Any = None, state: str | None = None, **_: Any
) -> None:
    started = _started.pop(task_id, None) if task_id is not None else None
    if started is not None:
        attributes = {"task": _task_name(task), "state": state or "UNKNOWN"}
        TASK_DURATION.record(time.perf_counter() - started, attributes)


def _failure(sender: Any = None, exception: BaseException | None = None, **_: Any) -> None:
    error = type(exception).__name__ if exception is not None else "unknown"
    TASK_FAILURES.add(1, {"task": _task_name(sender), ERROR_TYPE: error})


def connect() -> None:
    """Connect the handlers (idempotent: Celery drops a second connection with the same uid)."""
    signals.task_prerun.connect(_prerun, weak=False, dispatch_uid="queuecore.task_metrics.prerun")
    signals.task_postrun.connect(
        _postrun, weak=False, dispatch_uid="queuecore.task_metrics.postrun"
    )
    signals.task_failure.connect(
        _failure, weak=False, dispatch_uid="queuecore.task_metrics.failure"
    )
