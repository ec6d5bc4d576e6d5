"""The organisation's invoices for owners and admins (what ``GET /v1/invoices`` serves): a list,
one invoice, its CSV and a print-styled page (the browser's "print to PDF" makes the PDF)."""

from __future__ import annotations

import csv
import io
from typing import Any

from litestar import Controller, Request, Response, get
from litestar.params import FromPath

from billing.invoice_schemas import InvoiceView
from billing.invoicing import format_cents
from control_plane.dashboard.pages import SECURITY_HEADERS, page
from control_plane.dashboard.scope import environment
from control_plane.dashboard.sessions import require_session
from control_plane.edge.resources import billing_of

CSV_COLUMNS = (
    "number",
    "kind",
    "position",
    "description",
    "project",
    "environment",
    "messages_in",
    "messages_out",
    "bytes_in",
    "bytes_out",
    "requests",
    "storage_gb_months",
    "amount_cents",
    "currency",
)
# A cell starting with one of these is a formula to a spreadsheet: it is prefixed with ``'``.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


class InvoicePages(Controller):
    """``/dashboard/envs/{env}/invoices``: the organisation of the environment's invoices."""

    path = "/dashboard/envs/{env_id:str}/invoices"
    guards = [require_session]
    include_in_schema = False

    @get("/")
    async def index(self, request: Request[Any, Any, Any], env_id: FromPath[str]) -> Response[Any]:
        """Every issued invoice and credit note, newest month first."""
        access = await environment(request, env_id, "view_usage")
        listed = await billing_of(request.app).invoices(access.organisation.id)
        return page(
            request,
            "invoices.html",
            access=access,
            section="invoices",
            invoices=listed.invoices,
            money=format_cents,
        )

    @get("/{number:str}")
    async def show(
        self, request: Request[Any, Any, Any], env_id: FromPath[str], number: FromPath[str]
    ) -> Response[Any]:
        """One invoice or credit note with its lines."""
        access, invoice = await _invoice(request, env_id, number)
        return page(
            request,
            "invoice.html",
            access=access,
            section="invoices",
            invoice=invoice,
            money=format_cents,
        )

    @get("/{number:str}/print")
    async def printable(
        self, request: Request[Any, Any, Any], env_id: FromPath[str], number: FromPath[str]
    ) -> Response[Any]:
        """The invoice alone on a page styled for printing (and saving as PDF)."""
        access, invoice = await _invoice(request, env_id, number)
        return page(
            request,
            "invoice_print.html",
            access=access,
            invoice=invoice,
            money=format_cents,
        )

    @get("/{number:str}/csv")
    async def csv_download(
        self, request: Request[Any, Any, Any], env_id: FromPath[str], number: FromPath[str]
    ) -> Response[str]:
        """The lines as CSV (amounts in cents), one row each, then the total."""
        _, invoice = await _invoice(request, env_id, number)
        disposition = f'attachment; filename="{invoice.number}.csv"'
        return Response(
            invoice_csv(invoice),
            media_type="text/csv; charset=utf-8",
            headers={**SECURITY_HEADERS, "Content-Disposition": disposition},
        )


async def _invoice(
    request: Request[Any, Any, Any], env_id: str, number: str
) -> tuple[Any, InvoiceView]:
    access = await environment(request, env_id, "view_usage")
    invoice = await billing_of(request.app).invoice(number, access.organisation.id)
    return access, invoice


def invoice_csv(invoice: InvoiceView) -> str:
    """The CSV form: a header, a row per line, a ``total`` row; text cells never formulas."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    for line in invoice.lines:
        writer.writerow(
            [
                invoice.number,
                line.kind,
                line.position,
                _cell(line.description),
                _cell(line.project or ""),
                _cell(line.environment or ""),
                line.messages_in,
                line.messages_out,
                line.bytes_in,
                line.bytes_out,
                line.requests,
                f"{line.storage_gb_months:.9f}",
                line.amount_cents,
                invoice.currency,
            ]
        )
    blanks = [""] * (len(CSV_COLUMNS) - 6)
    writer.writerow(
        [invoice.number, "total", "", "Total", *blanks, invoice.total_cents, invoice.currency]
    )
    return out.getvalue()


def _cell(text: str) -> str:
    return f"'{text}" if text.startswith(FORMULA_STARTS) else text
