"""The estimated amount of a month of usage at a tier's list prices."""

from __future__ import annotations

from billing.plans import BillableUsage, estimate_cents

MONTH = BillableUsage(
    messages_in=3_000_000,
    messages_out=3_000_000,
    bytes_in=5 * 10**9,
    bytes_out=6 * 10**9,
    requests=3_800,
    storage_gb_months=2.0,
)


def test_pro_list_prices_per_quantity() -> None:
    # 3 M in * $0.40 + 3 M out * $0.20 + 5 GB * $0.05 + 6 GB * $0.09 + 2 GB-months * $0.10
    # + 0.0038 M requests * $0.10 = $2.79038
    assert estimate_cents("pro", MONTH) == 279
    assert estimate_cents("enterprise", MONTH) == 279  # list price; the contract decides


def test_the_developer_tier_is_free() -> None:
    assert estimate_cents("developer", MONTH) == 0


def test_half_a_cent_rounds_up() -> None:
    half_cent = BillableUsage(12_500, 0, 0, 0, 0, 0.0)  # 0.0125 M * $0.40 = $0.005
    assert estimate_cents("pro", half_cent) == 1
    assert estimate_cents("pro", BillableUsage(12_499, 0, 0, 0, 0, 0.0)) == 0
