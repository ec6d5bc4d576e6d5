"""Invoices and credit notes: issued per organisation and UTC month, read back, corrected.

An invoice is priced by :func:`billing.invoice_lines.priced_lines` from the month's metered usage
per environment (the monthly rollup's sums, per environment; issued only once the Spark rollup
has computed the month since its last usage change, so the lines add up to it), stored as a draft with its lines
and set issued in one transaction, numbered gaplessly per series and year of issue
(``QC-2026-000001``; credit notes ``CN-…``). Issued documents are immutable (triggers of
migration 0019); a correction is a credit note. Re-running a month finds the invoice it issued
(one per organisation and month, a unique index) and changes nothing. docs/billing.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from billing import plans
from billing import queries as q
from billing.invoice_lines import EnvironmentUsage, PricedLine, invoice_number, priced_lines
from billing.invoice_schemas import InvoiceLineView, InvoiceList, InvoiceSummary, InvoiceView
from billing.plans import BillableUsage
from billing.usage import month_bounds
from core.db import Conn
from core.errors import Conflict, NotFound, ValidationFailed
from tenants.ids import new_id

INVOICE_SERIES = "QC"
CREDIT_NOTE_SERIES = "CN"
# A month is invoiced this long after it ended: the rollup recomputes the previous month during
# the first three hours of the next one, while its last hour's counts and samples arrive.
ISSUE_AFTER_S = 4 * 3600
MAX_LISTED = 240  # twenty years of monthly invoices, with room for credit notes
MAX_REASON_CHARS = 500
GB = Decimal(1_000_000_000)
STORAGE_PLACES = Decimal("0.000000001")


class InvoiceNotFound(NotFound):
    """No issued invoice or credit note with that number in the caller's organisation."""

    code = "INVOICE_NOT_FOUND"


@dataclass(frozen=True, slots=True)
class IssueReport:
    """What one run over a month did: the numbers it issued and those it found issued."""

    month: date
    issued: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)  # organisations waiting for the rollup

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly (the CLI's output, the Celery task's result)."""
        month = self.month.strftime("%Y-%m")
        return {
            "month": month,
            "issued": self.issued,
            "existing": self.existing,
            "waitingForRollup": self.waiting,
        }


@dataclass(frozen=True, slots=True)
class _Draft:
    """An invoice or credit note before it is stored."""

    kind: str
    series: str
    organisation_id: str
    organisation_name: str
    tier: str
    period_start: date
    period_end: date
    lines: list[dict[str, Any]]
    credited_invoice_id: str | None = None
    reason: str | None = None


# --- months ------------------------------------------------------------------------------------


def parse_month(text: str) -> date:
    """``YYYY-MM`` as the month's first day."""
    try:
        return datetime.strptime(text, "%Y-%m").date()
    except ValueError:
        raise ValidationFailed(f"month must be YYYY-MM, got {text!r}", field="month") from None


def previous_month(now: datetime) -> date:
    """The first day of the UTC month before ``now``'s."""
    first, _ = month_bounds(now)
    return (first - timedelta(days=1)).date().replace(day=1)


def _bounds(month: date) -> tuple[datetime, datetime]:
    return month_bounds(datetime(month.year, month.month, 1, tzinfo=UTC))


# --- issuing -----------------------------------------------------------------------------------


async def issue_month(
    conn: Conn, month: date, now: datetime, organisation_id: str | None = None
) -> IssueReport:
    """Issue the month's invoice of every billed organisation (or of one) that has none yet."""
    since, until = _bounds(month)
    if now < until + timedelta(seconds=ISSUE_AFTER_S):
        raise ValidationFailed(
            f"{month:%Y-%m} can be invoiced from {until + timedelta(seconds=ISSUE_AFTER_S)}",
            field="month",
        )
    params = {
        "tiers": plans.billed_tiers(),
        "organisation_id": organisation_id,
        "since": since,
        "until": until,
    }
    organisations = await (await conn.execute(q.SELECT_BILLED_ORGANISATIONS, params)).fetchall()
    report = IssueReport(month)
    for organisation in organisations:
        number, issued = await issue_invoice(conn, organisation, since, until, now)
        if number is None:
            report.waiting.append(organisation["id"])
        else:
            (report.issued if issued else report.existing).append(number)
    return report


async def issue_invoice(
    conn: Conn, organisation: dict[str, Any], since: datetime, until: datetime, now: datetime
) -> tuple[str | None, bool]:
    """The organisation's invoice of ``[since, until)``: its number, and whether this call issued
    it (False: it was issued before, and is left as it is). No number while the monthly rollup
    has not computed the month since its last usage change (the invoice waits for it)."""
    existing = await _period_number(conn, organisation["id"], since.date())
    if existing is not None:
        return existing, False
    if await _rollup_pending(conn, organisation["id"], since, until):
        return None, False
    usages = await _environment_month(conn, organisation["id"], since, until)
    period = f"{since:%B %Y}"
    draft = _Draft(
        kind="invoice",
        series=INVOICE_SERIES,
        organisation_id=organisation["id"],
        organisation_name=organisation["name"],
        tier=organisation["tier"],
        period_start=since.date(),
        period_end=until.date(),
        lines=[_line_row(line) for line in priced_lines(organisation["tier"], period, usages)],
    )
    number = await _store(conn, draft, now)
    if number is None:  # another run issued it meanwhile
        number = await _period_number(conn, organisation["id"], since.date())
        assert number is not None
        return number, False
    return number, True


async def _rollup_pending(
    conn: Conn, organisation_id: str, since: datetime, until: datetime
) -> list[str]:
    """The organisation's projects whose monthly rollup is missing or older than their usage."""
    params = {"organisation_id": organisation_id, "since": since, "until": until}
    rows = await (await conn.execute(q.SELECT_ROLLUP_PENDING, params)).fetchall()
    return [row["project_id"] for row in rows]


async def _period_number(conn: Conn, organisation_id: str, period_start: date) -> str | None:
    params = {"organisation_id": organisation_id, "period_start": period_start}
    row = await (await conn.execute(q.SELECT_PERIOD_INVOICE, params)).fetchone()
    return None if row is None else str(row["number"])


async def _environment_month(
    conn: Conn, organisation_id: str, since: datetime, until: datetime
) -> list[EnvironmentUsage]:
    """Each environment's billable month (as the monthly rollup computes a project's)."""
    params = {"organisation_id": organisation_id, "since": since, "until": until}
    rows = await (await conn.execute(q.SELECT_ENVIRONMENT_MONTH, params)).fetchall()
    hours = int((until - since).total_seconds()) // 3600
    return [_environment_usage(row, hours) for row in rows]


def _environment_usage(row: dict[str, Any], hours_in_month: int) -> EnvironmentUsage:
    storage = Decimal(repr(float(row["storage_byte_hours"]))) / GB / hours_in_month
    usage = BillableUsage(
        messages_in=int(row["messages_in"]),
        messages_out=int(row["messages_out"]),
        bytes_in=int(row["bytes_in"]),
        bytes_out=int(row["bytes_out"]),
        requests=int(row["requests"]),
        storage_gb_months=float(storage.quantize(STORAGE_PLACES)),
    )
    return EnvironmentUsage(
        row["project_id"],
        row["project_name"],
        row["environment_id"],
        row["environment_name"],
        usage,
    )


def _line_row(line: PricedLine) -> dict[str, Any]:
    """A priced line as the columns of ``invoice_lines`` (position set when stored)."""
    source, usage = line.source, line.source.usage if line.source else None
    return {
        "kind": line.kind,
        "description": line.description,
        "project_id": source.project_id if source else None,
        "project_name": source.project if source else None,
        "environment_id": source.environment_id if source else None,
        "environment_name": source.environment if source else None,
        "messages_in": usage.messages_in if usage else 0,
        "messages_out": usage.messages_out if usage else 0,
        "bytes_in": usage.bytes_in if usage else 0,
        "bytes_out": usage.bytes_out if usage else 0,
        "requests": usage.requests if usage else 0,
        "storage_gb_months": Decimal(repr(usage.storage_gb_months)) if usage else Decimal(0),
        "amount_cents": line.amount_cents,
    }


async def _store(conn: Conn, draft: _Draft, now: datetime) -> str | None:
    """Number, insert and issue ``draft`` in one transaction; None (and nothing kept, the
    number given back) when its organisation's month already has an invoice."""
    try:
        async with conn.transaction():
            return await _store_in_transaction(conn, draft, now)
    except _AlreadyIssued:
        return None


class _AlreadyIssued(Exception):
    """Rolls the issuing transaction back (and with it the number it took)."""


async def _store_in_transaction(conn: Conn, draft: _Draft, now: datetime) -> str:
    number, sequence = await _next_number(conn, draft.series, now.year)
    if not await _insert(conn, draft, number, sequence, now):
        raise _AlreadyIssued
    return number


async def _insert(conn: Conn, draft: _Draft, number: str, sequence: int, now: datetime) -> bool:
    """Insert the draft with its lines and issue it; False if its month has an invoice."""
    invoice_id = new_id("inv")
    params = {
        "id": invoice_id,
        "number": number,
        "kind": draft.kind,
        "series": draft.series,
        "year": now.year,
        "sequence": sequence,
        "organisation_id": draft.organisation_id,
        "organisation_name": draft.organisation_name,
        "tier": draft.tier,
        "period_start": draft.period_start,
        "period_end": draft.period_end,
        "currency": plans.CURRENCY,
        "total_cents": sum(line["amount_cents"] for line in draft.lines),
        "credited_invoice_id": draft.credited_invoice_id,
        "reason": draft.reason,
    }
    if await (await conn.execute(q.INSERT_INVOICE, params)).fetchone() is None:
        return False
    await conn.execute(q.INSERT_LINES, _line_columns(invoice_id, draft.lines))
    await conn.execute(q.ISSUE, {"id": invoice_id, "issued_at": now})
    return True


async def _next_number(conn: Conn, series: str, year: int) -> tuple[str, int]:
    cursor = await conn.execute(q.NEXT_SEQUENCE, {"series": series, "year": year})
    row = await cursor.fetchone()
    assert row is not None
    sequence = int(row["last_sequence"])
    return invoice_number(year, sequence, prefix=series), sequence


def _line_columns(invoice_id: str, lines: list[dict[str, Any]]) -> dict[str, Any]:
    names = (
        "kind",
        "description",
        "project_id",
        "project_name",
        "environment_id",
        "environment_name",
        "messages_in",
        "messages_out",
        "bytes_in",
        "bytes_out",
        "requests",
        "storage_gb_months",
        "amount_cents",
    )
    columns: dict[str, Any] = {name: [line[name] for line in lines] for name in names}
    columns["position"] = list(range(1, len(lines) + 1))
    columns["invoice_id"] = invoice_id
    return columns


# --- credit notes ------------------------------------------------------------------------------


async def issue_credit_note(
    conn: Conn,
    number: str,
    reason: str,
    now: datetime,
    amount_cents: int | None = None,
    organisation_id: str | None = None,
) -> InvoiceView:
    """Credit ``amount_cents`` of invoice ``number`` (all that is left uncredited if None): a new
    document with its own number and negative lines; the invoice itself never changes."""
    reason = reason.strip()
    if not 1 <= len(reason) <= MAX_REASON_CHARS:
        raise ValidationFailed(f"reason must be 1 to {MAX_REASON_CHARS} characters", field="reason")
    async with conn.transaction():
        invoice = await get_invoice(conn, number, organisation_id)
        if invoice.kind != "invoice":
            raise ValidationFailed(f"{number} is a credit note, not an invoice", field="number")
        credit_number, sequence = await _next_number(conn, CREDIT_NOTE_SERIES, now.year)
        lines = await _credit_lines(conn, invoice, amount_cents)
        draft = _Draft(
            kind="credit_note",
            series=CREDIT_NOTE_SERIES,
            organisation_id=invoice.organisation_id,
            organisation_name=invoice.organisation,
            tier=invoice.tier,
            period_start=invoice.period_start,
            period_end=invoice.period_end,
            lines=lines,
            credited_invoice_id=await _invoice_id(conn, number),
            reason=reason,
        )
        await _insert(conn, draft, credit_number, sequence, now)
    return await get_invoice(conn, credit_number, organisation_id)


async def _credit_lines(
    conn: Conn, invoice: InvoiceView, amount_cents: int | None
) -> list[dict[str, Any]]:
    """Every charged line negated (a full credit of an uncredited invoice), or one line."""
    invoice_id = await _invoice_id(conn, invoice.number)
    row = await (await conn.execute(q.SELECT_CREDITED, {"invoice_id": invoice_id})).fetchone()
    left = invoice.total_cents + int(row["credited"] if row else 0)
    if left <= 0:
        raise Conflict(f"{invoice.number} is credited in full already", number=invoice.number)
    if amount_cents is None and left == invoice.total_cents:
        return [_negated(line) for line in invoice.lines if line.amount_cents > 0]
    amount = left if amount_cents is None else amount_cents
    if not 1 <= amount <= left:
        raise ValidationFailed(
            f"amountCents must be 1 to {left} (what is left to credit of {invoice.number})",
            field="amountCents",
        )
    return [_credit_row(f"Credit on {invoice.number}", -amount)]


def _negated(line: InvoiceLineView) -> dict[str, Any]:
    row = _credit_row(f"Credit: {line.description}", -line.amount_cents)
    row.update(
        project_id=line.project_id,
        project_name=line.project,
        environment_id=line.environment_id,
        environment_name=line.environment,
    )
    return row


def _credit_row(description: str, amount_cents: int) -> dict[str, Any]:
    return _line_row(PricedLine("credit", description, amount_cents))


async def _invoice_id(conn: Conn, number: str) -> str:
    row = await (await conn.execute(q.SELECT_INVOICE_ID, {"number": number})).fetchone()
    if row is None:
        raise InvoiceNotFound(f"No invoice {number!r}.", number=number)
    return str(row["id"])


# --- reading -----------------------------------------------------------------------------------


async def list_invoices(conn: Conn, organisation_id: str) -> InvoiceList:
    """The organisation's issued invoices and credit notes, newest month first."""
    params = {"organisation_id": organisation_id, "limit": MAX_LISTED}
    rows = await (await conn.execute(q.SELECT_INVOICES, params)).fetchall()
    return InvoiceList([InvoiceSummary(**_summary_fields(row)) for row in rows])


async def get_invoice(conn: Conn, number: str, organisation_id: str | None) -> InvoiceView:
    """One issued document with its lines; 404 if it is not the organisation's (None: any)."""
    params = {"number": number, "organisation_id": organisation_id}
    row = await (await conn.execute(q.SELECT_INVOICE, params)).fetchone()
    if row is None:
        raise InvoiceNotFound(f"No invoice or credit note {number!r}.", number=number)
    lines = await (await conn.execute(q.SELECT_LINES, {"invoice_id": row["id"]})).fetchall()
    return InvoiceView(**_summary_fields(row), lines=[_line_view(line) for line in lines])


def _summary_fields(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "number": row["number"],
        "kind": row["kind"],
        "organisation_id": row["organisation_id"],
        "organisation": row["organisation_name"],
        "tier": row["tier"],
        "period_start": row["period_start"],
        "period_end": row["period_end"],
        "currency": row["currency"],
        "total_cents": int(row["total_cents"]),
        "issued_at": row["issued_at"],
        "credits_number": row["credited_number"],
        "reason": row["reason"],
    }


def _line_view(row: dict[str, Any]) -> InvoiceLineView:
    return InvoiceLineView(
        position=row["position"],
        kind=row["kind"],
        description=row["description"],
        project_id=row["project_id"],
        project=row["project_name"],
        environment_id=row["environment_id"],
        environment=row["environment_name"],
        messages_in=int(row["messages_in"]),
        messages_out=int(row["messages_out"]),
        bytes_in=int(row["bytes_in"]),
        bytes_out=int(row["bytes_out"]),
        requests=int(row["requests"]),
        storage_gb_months=float(row["storage_gb_months"]),
        amount_cents=int(row["amount_cents"]),
    )


def format_cents(cents: int, currency: str = plans.CURRENCY) -> str:
    """``-1234`` as ``-12.34 USD``: the amount in major units, two decimals."""
    sign = "-" if cents < 0 else ""
    return f"{sign}{abs(cents) // 100}.{abs(cents) % 100:02d} {currency}"
