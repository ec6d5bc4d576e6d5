"""Celery tasks of billing: the storage sampler (beat, every 5 min).

A thin shell around :func:`billing.usage.sample_storage`, on a fresh autocommit connection from
the same settings the API uses (as :mod:`data_plane.tasks`). Idempotent: a second run in the same
5-minute slot adds no sample. The usage aggregation job's task is
``spark_pipelines.run_usage_aggregation``.
"""

from __future__ import annotations

from typing import TypeVar

from celery import shared_task

from billing import usage
from core.worker import run_connected

Result = TypeVar("Result")


@shared_task(name="billing.sample_storage")
def sample_storage(environment_id: str | None = None) -> dict[str, int]:
    """Add this slot's sample of every environment's stored bytes to its hourly usage."""
    sampled = run_connected(lambda conn: usage.sample_storage(conn, environment_id=environment_id))
    return {"environmentsSampled": sampled}
