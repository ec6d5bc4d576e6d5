"""Invoice numbering and line pricing, checked against hand-computed amounts."""

import pytest

from billing.invoice_lines import invoice_lines, invoice_number, total_cents
from billing.plans import BillableUsage


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
