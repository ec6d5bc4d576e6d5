"""Celery tasks of billing: the storage sampler (beat, every 5 min) and invoicing (hourly).

Thin shells around the billing service (:class:`billing.service.Billing`), on fresh autocommit
connections from the same settings the API uses (as :mod:`data_plane.tasks`). Idempotent: a second run in the same
5-minute slot adds no sample. The usage aggregation job's task is
``spark_pipelines.run_usage_aggregation``.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from celery import shared_task

from billing import invoicing
from billing.service import Billing
from core import settings
from core.db import Connector
from core.worker import send_task

ROLLUP_TASK = "spark_pipelines.run_usage_aggregation"


@shared_task(name="billing.sample_storage")
def sample_storage(environment_id: str | None = None) -> dict[str, int]:
    """Add this slot's sample of every environment's stored bytes to its hourly usage."""
    sampled = asyncio.run(billing().sample_storage(environment_id))
    return {"environmentsSampled": sampled}


@shared_task(name="billing.issue_invoices")
def issue_invoices(
    month: str | None = None, now: str | None = None, organisation_id: str | None = None
) -> dict[str, Any]:
    """Issue the month's invoices (default: the previous month, once it may be invoiced).

    Beat runs it hourly: until the previous month may be invoiced (``ISSUE_AFTER_S`` after it
    ended, when the rollup has recomputed it for the last time) it does nothing, and afterwards a
    run finds every invoice issued and changes nothing. An organisation whose usage changed
    after the rollup's last run of the month waits: the rollup is queued for that month, and a
    later run issues the invoice. ``organisation_id`` narrows it to one organisation; ``now``
    (ISO 8601) is for tests.
    """
    moment = datetime.fromisoformat(now) if now else datetime.now(UTC)
    target = invoicing.parse_month(month) if month else invoicing.previous_month(moment)
    _, until = invoicing.month_bounds(datetime(target.year, target.month, 1, tzinfo=UTC))
    if month is None and moment < until + timedelta(seconds=invoicing.ISSUE_AFTER_S):
        return {"month": f"{target:%Y-%m}", "skipped": "the month may not be invoiced yet"}
    report = asyncio.run(billing().issue_month(target, moment, organisation_id))
    if report.waiting:  # usage changed after the rollup's last run: have it recompute the month
        send_task(ROLLUP_TASK, kwargs={"month": f"{target:%Y-%m}"}, ignore_result=True)
    return report.as_dict()


def billing() -> Billing:
    """The billing service on fresh connections to the configured database."""
    return Billing(Connector(settings.database().url))
