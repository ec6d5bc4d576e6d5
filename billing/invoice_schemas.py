"""Wire shapes of invoices and credit notes (``GET /v1/invoices``): msgspec Structs, camelCase."""

from __future__ import annotations

from datetime import date, datetime
from typing import Literal

import msgspec

InvoiceKind = Literal["invoice", "credit_note"]
LineKind = Literal["base", "usage", "credit"]


class InvoiceLineView(msgspec.Struct, rename="camel", kw_only=True):
    """One line: the base price, an environment's usage above the allowance, or a credit.

    The usage fields are the environment's quantities of the month (zeros on other lines);
    ``amountCents`` is what the line costs, negative on a credit note.
    """

    position: int
    kind: LineKind
    description: str
    project_id: str | None
    project: str | None
    environment_id: str | None
    environment: str | None
    messages_in: int
    messages_out: int
    bytes_in: int
    bytes_out: int
    requests: int
    storage_gb_months: float
    amount_cents: int


class InvoiceSummary(msgspec.Struct, rename="camel", kw_only=True):
    """An issued invoice or credit note, without its lines.

    Amounts are integer minor units of ``currency`` (cents of USD). ``periodEnd`` is exclusive.
    A credit note names the invoice it corrects in ``creditsNumber``.
    """

    number: str
    kind: InvoiceKind
    organisation_id: str
    organisation: str
    tier: str
    period_start: date
    period_end: date
    currency: str
    total_cents: int
    issued_at: datetime
    credits_number: str | None
    reason: str | None


class InvoiceView(InvoiceSummary, rename="camel", kw_only=True):
    """``GET /v1/invoices/{number}``: the document with its lines."""

    lines: list[InvoiceLineView]


class InvoiceList(msgspec.Struct, rename="camel"):
    """``GET /v1/invoices``: the organisation's invoices and credit notes, newest month first."""

    invoices: list[InvoiceSummary]
