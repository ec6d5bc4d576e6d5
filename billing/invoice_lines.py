"""Invoice numbers and line items, computed from billable usage (pure; storage in
:mod:`billing.invoicing`)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from billing.plans import ALLOWANCES, BASE_CENTS, Allowance, BillableUsage, estimate_cents


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


# --- invoice pricing: the base price, then usage above the tier's allowance ---------------------


@dataclass(frozen=True, slots=True)
class EnvironmentUsage:
    """One environment's billable month, with the names the invoice prints."""

    project_id: str
    project: str
    environment_id: str
    environment: str
    usage: BillableUsage


@dataclass(frozen=True, slots=True)
class PricedLine:
    """A line of an invoice: the base price (``base``) or an environment's usage (``usage``)."""

    kind: str
    description: str
    amount_cents: int
    source: EnvironmentUsage | None = None


_COUNTED = ("messages_in", "messages_out", "bytes_in", "bytes_out", "requests")


def priced_lines(tier: str, period: str, usages: list[EnvironmentUsage]) -> list[PricedLine]:
    """The base price line (paid tiers), then one usage line per environment sorted by (project,
    environment), each priced above what is left of the allowance: earlier lines use it first."""
    lines = []
    if BASE_CENTS.get(tier, 0) > 0:
        lines.append(PricedLine("base", f"{tier.capitalize()} plan, {period}", BASE_CENTS[tier]))
    left = _allowance_left(ALLOWANCES.get(tier, Allowance()))
    for item in sorted(usages, key=lambda u: (u.project, u.environment, u.environment_id)):
        over = _above_allowance(item.usage, left)
        description = f"Usage of {item.project} / {item.environment} above the allowance"
        lines.append(PricedLine("usage", description, estimate_cents(tier, over), item))
    return lines


def _allowance_left(allowance: Allowance) -> dict[str, Decimal]:
    left = {name: Decimal(getattr(allowance, name)) for name in _COUNTED}
    left["storage_gb_months"] = allowance.storage_gb_months
    return left


def _above_allowance(usage: BillableUsage, left: dict[str, Decimal]) -> BillableUsage:
    """The part of ``usage`` the allowance does not cover; ``left`` shrinks by what it covered."""
    above: dict[str, Decimal] = {}
    for name in (*_COUNTED, "storage_gb_months"):
        used = Decimal(repr(getattr(usage, name)))
        covered = min(used, left[name])
        left[name] -= covered
        above[name] = used - covered
    return BillableUsage(
        **{name: int(above[name]) for name in _COUNTED},
        storage_gb_months=float(above["storage_gb_months"]),
    )


def lines_total_cents(lines: list[PricedLine]) -> int:
    """The sum of the lines, in cents."""
    return sum(line.amount_cents for line in lines)
