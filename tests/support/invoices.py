"""A month of known usage for invoice tests, its hand-computed invoice, and issuing it."""

from __future__ import annotations

from datetime import UTC, date, datetime

from billing import invoicing
from core.db import connect
from tenants.models import NewOrganisation
from tests.support.tenancy import run_in_tx
from tests.support.usage import insert_hourly

MONTH = date(2025, 3, 1)  # 31 days: 744 hours
ISSUED_AT = datetime(2025, 4, 2, 9, 0, tzinfo=UTC)
# Pro: $25.00 base; allowance 10M messages in and out, 10 GB in and out, 10M requests and
# 10 GB-months, used by production first (lines are sorted by project, then environment).
# production: 12M in (2M over x $0.40 = $0.80) and 15 GB-months (5 over x $0.10 = $0.50): $1.30.
# staging: 3M in (all over: $1.20), 7M out (1M over: $0.20), 12 GB out (3 over x $0.09 = $0.27),
# 7.5M requests (2.5M over x $0.10 = $0.25): $1.92.
EXPECTED_LINES = [("base", None, 2500), ("usage", "production", 130), ("usage", "staging", 192)]
EXPECTED_TOTAL_CENTS = 2500 + 130 + 192


def seed_month(url: str, org: NewOrganisation, *, rollup: bool = True) -> None:
    """March 2025 of a Pro organisation's production and staging, rows just outside it, and
    (unless told not to) the project's monthly rollup row, as the Spark job would write it."""
    production = org.project.environment("production").id
    staging = org.project.environment("staging").id
    insert_hourly(
        url,
        production,
        datetime(2025, 3, 5, 10, tzinfo=UTC),
        messages_in=12_000_000,
        bytes_in=3_000_000_000,
        messages_out=4_000_000,
        bytes_out=1_000_000_000,
        publish_requests=2_000_000,
        consume_requests=3_000_000,
    )
    # One hour averaging 15 GB x 744 hours: 15 GB-months.
    stored = 15 * 744 * 1_000_000_000
    insert_hourly(
        url,
        production,
        datetime(2025, 3, 5, 11, tzinfo=UTC),
        storage_bytes_sum=stored,
        storage_bytes_max=stored,
        storage_samples=1,
    )
    insert_hourly(
        url,
        staging,
        datetime(2025, 3, 20, 8, tzinfo=UTC),
        messages_in=3_000_000,
        bytes_in=2_000_000_000,
        messages_out=7_000_000,
        bytes_out=12_000_000_000,
        publish_requests=6_000_000,
        consume_requests=1_000_000,
        admin_requests=500_000,
    )
    insert_hourly(url, production, datetime(2025, 2, 28, 23, tzinfo=UTC), messages_in=99_000_000)
    insert_hourly(url, production, datetime(2025, 4, 1, 0, tzinfo=UTC), messages_in=99_000_000)
    if rollup:
        seed_rollup(url, org.project.id)


def seed_rollup(url: str, project_id: str) -> None:
    """The project's ``usage_monthly`` row of March 2025 (the job's sums, no estimate), written now."""
    with connect(url) as conn:
        conn.execute(ROLLUP_ROW, {"project_id": project_id, "month": MONTH})


ROLLUP_ROW = """
INSERT INTO usage_monthly (project_id, month, organisation_id, tier, messages_in, messages_out, bytes_in,
                           bytes_out, publish_requests, consume_requests, admin_requests, storage_byte_hours,
                           messages_in_millions, messages_out_millions, gb_in, gb_out, storage_gb_months,
                           requests, estimated_amount_cents)
SELECT e.project_id, %(month)s, e.organisation_id, 'pro', sum(messages_in), sum(messages_out), sum(bytes_in),
       sum(bytes_out), sum(publish_requests), sum(consume_requests), sum(admin_requests),
       coalesce(sum(storage_bytes_sum::float8 / nullif(storage_samples, 0)), 0), 0, 0, 0, 0, 0,
       sum(publish_requests + consume_requests + admin_requests), 0
FROM usage_hourly u JOIN environments e ON e.id = u.environment_id
WHERE e.project_id = %(project_id)s AND u.hour >= %(month)s AND u.hour < %(month)s::date + interval '1 month'
GROUP BY e.project_id, e.organisation_id
ON CONFLICT (project_id, month) DO UPDATE SET computed_at = now()
"""


def issue(url: str, org: NewOrganisation, at: datetime = ISSUED_AT) -> invoicing.IssueReport:
    """Run the month's invoicing for this organisation only."""
    return run_in_tx(
        url,
        lambda conn: invoicing.issue_month(conn, MONTH, at, organisation_id=org.organisation.id),
    )
