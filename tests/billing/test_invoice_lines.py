"""Invoice numbering and line pricing, checked against hand-computed amounts."""

import pytest

from billing.invoice_lines import (
    EnvironmentUsage,
    invoice_lines,
    invoice_number,
    lines_total_cents,
    priced_lines,
    total_cents,
)
from billing.plans import BillableUsage, billed_tiers


def test_number_is_zero_padded_per_year() -> None:
    assert invoice_number(2026, 123) == "QC-2026-000123"
    with pytest.raises(ValueError):
        invoice_number(2026, 0)


def test_pro_lines_match_hand_computed_total() -> None:
    # 10M in at $0.40/M = $4.00; 5M out at $0.20/M = $1.00; 2 GB-months at $0.10 = $0.20
    usage = {
        ("web", "prod"): BillableUsage(10_000_000, 5_000_000, 0, 0, 0, 2.0),
        ("api", "dev"): BillableUsage(1_000_000, 0, 0, 0, 0, 0.0),  # $0.40
    }
    lines = invoice_lines("pro", usage)
    assert [(x.project, x.environment, x.amount_cents) for x in lines] == [
        ("api", "dev", 40),
        ("web", "prod", 520),
    ]
    assert total_cents(lines) == 560


def test_the_allowance_is_used_by_lines_in_order_and_the_base_price_comes_first() -> None:
    # Pro includes 10M messages in: "api" uses 6M of it, "web" the other 4M and pays 2M x $0.40.
    usages = [
        EnvironmentUsage(
            "p2", "web", "e2", "production", BillableUsage(6_000_000, 0, 0, 0, 0, 0.0)
        ),
        EnvironmentUsage(
            "p1", "api", "e1", "production", BillableUsage(6_000_000, 0, 0, 0, 0, 0.0)
        ),
    ]
    lines = priced_lines("pro", "March 2025", usages)
    assert [(x.kind, x.source.project if x.source else None, x.amount_cents) for x in lines] == [
        ("base", None, 2500),
        ("usage", "api", 0),
        ("usage", "web", 80),
    ]
    assert lines[0].description == "Pro plan, March 2025"
    assert lines_total_cents(lines) == 2580


def test_storage_above_the_allowance_is_billed_in_fractions_of_a_gb_month() -> None:
    usage = [EnvironmentUsage("p", "a", "e", "staging", BillableUsage(0, 0, 0, 0, 0, 12.5))]
    assert [x.amount_cents for x in priced_lines("pro", "May 2025", usage)] == [2500, 25]


def test_developer_is_free_and_billed_tiers_are_the_paid_ones() -> None:
    usage = [EnvironmentUsage("p", "a", "e", "staging", BillableUsage(10**9, 10**9, 0, 0, 0, 99.0))]
    assert [x.amount_cents for x in priced_lines("developer", "May 2025", usage)] == [0]
    assert billed_tiers() == ["enterprise", "pro"]
