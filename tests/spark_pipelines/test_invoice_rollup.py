"""An invoice's usage lines agree with the monthly Spark rollup of the same hours: per project,
the lines' quantities add up to the rollup's row (real job, real local SparkSession)."""

from __future__ import annotations

from typing import Any

import pytest

from billing import invoicing
from core.db import connect
from tests.support.invoices import MONTH, issue, seed_month
from tests.support.services import Services
from tests.support.tenancy import new_organisation, run_in_tx

QUANTITIES = ("messages_in", "messages_out", "bytes_in", "bytes_out", "requests")


@pytest.fixture(scope="module")
def job(spark: Any) -> Any:
    """The rollup module (imported once the session fixture has found PySpark and Java)."""
    from spark_pipelines import usage_aggregation

    return usage_aggregation


def test_the_invoice_lines_of_a_project_add_up_to_its_monthly_rollup(
    job: Any, spark: Any, services: Services
) -> None:
    url = services.database_url
    org = new_organisation(url, tier="pro")
    seed_month(url, org, rollup=False)
    waiting = issue(url, org)  # no rollup of the month yet: the invoice waits for it
    assert (waiting.issued, waiting.waiting) == ([], [org.organisation.id])
    job.run(spark, url, MONTH)
    number = issue(url, org).issued[0]

    invoice = run_in_tx(url, lambda conn: invoicing.get_invoice(conn, number, None))
    with connect(url) as conn:
        rollup = conn.execute(
            "SELECT * FROM usage_monthly WHERE project_id = %s AND month = %s",
            (org.project.id, MONTH),
        ).fetchone()

    assert rollup is not None
    usage = [line for line in invoice.lines if line.kind == "usage"]
    assert {line.project_id for line in usage} == {org.project.id}
    for name in QUANTITIES:
        assert sum(getattr(line, name) for line in usage) == rollup[name], name
    storage = sum(line.storage_gb_months for line in usage)
    assert storage == pytest.approx(rollup["storage_gb_months"], rel=1e-9)
    assert rollup["storage_gb_months"] == pytest.approx(15.0)
