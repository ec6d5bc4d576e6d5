"""Invoice numbers and line items, computed from billable usage (pure; no storage yet)."""

from __future__ import annotations

from dataclasses import dataclass

from billing.plans import BillableUsage, estimate_cents


@dataclass(frozen=True, slots=True)
class InvoiceLine:
    """One project/environment line: its usage amount in integer cents."""

    project: str
    environment: str
    amount_cents: int


def invoice_number(year: int, sequence: int, prefix: str = "QC") -> str:
    """The printed number, e.g. ``QC-2026-000123``; ``sequence`` is gapless per instance and year."""
    if sequence < 1:
        raise ValueError("invoice sequence starts at 1")
    return f"{prefix}-{year:04d}-{sequence:06d}"


def invoice_lines(tier: str, usage: dict[tuple[str, str], BillableUsage]) -> list[InvoiceLine]:
    """Lines sorted by (project, environment), each priced at ``tier``'s list prices."""
    return [
        InvoiceLine(project, environment, estimate_cents(tier, usage[(project, environment)]))
        for project, environment in sorted(usage)
    ]


def total_cents(lines: list[InvoiceLine]) -> int:
    """The invoice total in cents."""
    return sum(line.amount_cents for line in lines)
