"""A month of known usage for invoice tests, its hand-computed invoice, and issuing it."""

from __future__ import annotations

from datetime import UTC, date, datetime

from billing import invoicing
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


def seed_month(url: str, org: NewOrganisation) -> None:
    """March 2025 of a Pro organisation's production and staging, and rows just outside it."""
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


def issue(url: str, org: NewOrganisation, at: datetime = ISSUED_AT) -> invoicing.IssueReport:
    """Run the month's invoicing for this organisation only."""
    return run_in_tx(
        url,
        lambda conn: invoicing.issue_month(conn, MONTH, at, organisation_id=org.organisation.id),
    )
