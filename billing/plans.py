"""Per-tier list prices and the estimated amount of a project's month of usage.

An **estimate**, not an invoice: list prices of the organisation's current tier applied to the
project's billable quantities, with no plan fee, allowance, discount, tax or proration (an
organisation that changed tier mid-month is estimated at its tier when the job ran). The
Developer tier is free (its limits are the rate limits and quotas of ``tenants.tiers``);
Enterprise is estimated at Pro list prices, its contract decides. docs/billing.md.

Invoices (:mod:`billing.invoicing`) add each tier's monthly base price and its included
allowance (:data:`BASE_CENTS`, :data:`ALLOWANCES`): usage is billed only above the allowance.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

CURRENCY = "USD"
_MILLION = Decimal(1_000_000)
_GB = Decimal(1_000_000_000)  # decimal gigabytes, as cloud providers bill


@dataclass(frozen=True, slots=True)
class Plan:
    """Unit prices in US dollars."""

    per_million_messages_in: Decimal = Decimal(0)
    per_million_messages_out: Decimal = Decimal(0)
    per_gb_in: Decimal = Decimal(0)
    per_gb_out: Decimal = Decimal(0)
    per_gb_month: Decimal = Decimal(0)
    per_million_requests: Decimal = Decimal(0)


_PRO = Plan(
    per_million_messages_in=Decimal("0.40"),
    per_million_messages_out=Decimal("0.20"),
    per_gb_in=Decimal("0.05"),
    per_gb_out=Decimal("0.09"),
    per_gb_month=Decimal("0.10"),
    per_million_requests=Decimal("0.10"),
)
PLANS: dict[str, Plan] = {"developer": Plan(), "pro": _PRO, "enterprise": _PRO}


@dataclass(frozen=True, slots=True)
class BillableUsage:
    """One project's month: counts, payload bytes, requests and storage in GB-months."""

    messages_in: int
    messages_out: int
    bytes_in: int
    bytes_out: int
    requests: int
    storage_gb_months: float


def estimate_cents(tier: str, usage: BillableUsage) -> int:
    """The estimated amount in cents (half up) at ``tier``'s list prices; unknown tier: Pro."""
    plan = PLANS.get(tier, _PRO)
    dollars = (
        Decimal(usage.messages_in) / _MILLION * plan.per_million_messages_in
        + Decimal(usage.messages_out) / _MILLION * plan.per_million_messages_out
        + Decimal(usage.bytes_in) / _GB * plan.per_gb_in
        + Decimal(usage.bytes_out) / _GB * plan.per_gb_out
        + Decimal(repr(usage.storage_gb_months)) * plan.per_gb_month
        + Decimal(usage.requests) / _MILLION * plan.per_million_requests
    )
    return int((dollars * 100).quantize(Decimal(1), rounding=ROUND_HALF_UP))


# --- invoices: the monthly base price and the usage it includes ---------------------------------


@dataclass(frozen=True, slots=True)
class Allowance:
    """What a tier's base price includes each month, per organisation (decimal units)."""

    messages_in: int = 0
    messages_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    requests: int = 0
    storage_gb_months: Decimal = Decimal(0)


_PRO_ALLOWANCE = Allowance(
    messages_in=10_000_000,
    messages_out=10_000_000,
    bytes_in=10_000_000_000,
    bytes_out=10_000_000_000,
    requests=10_000_000,
    storage_gb_months=Decimal(10),
)
# The monthly base price in cents (whole month, no proration); Developer is free.
BASE_CENTS: dict[str, int] = {"developer": 0, "pro": 2_500, "enterprise": 2_500}
ALLOWANCES: dict[str, Allowance] = {
    "developer": Allowance(),
    "pro": _PRO_ALLOWANCE,
    "enterprise": _PRO_ALLOWANCE,
}


def is_billed(tier: str) -> bool:
    """Whether the tier pays anything (a base price or a unit price): it gets invoices."""
    plan = PLANS.get(tier, _PRO)
    return BASE_CENTS.get(tier, 0) > 0 or plan != Plan()


def billed_tiers() -> list[str]:
    """The tiers that get invoices."""
    return sorted(tier for tier in PLANS if is_billed(tier))
