"""``GET /v1/invoices`` and ``GET /v1/invoices/{number}`` (admin scope): the organisation's
invoices and credit notes. Any admin key of the organisation sees them (invoices are per
organisation); another organisation's number is 404 ``INVOICE_NOT_FOUND``."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, get
from litestar.di import NamedDependency
from litestar.params import FromPath

from billing.invoice_schemas import InvoiceList, InvoiceView
from billing.service import Billing
from control_plane.edge.auth import auth_context


class InvoicesController(Controller):
    """The caller's organisation's issued invoices and credit notes."""

    path = "/invoices"
    tags = ["invoices"]
    opt = {"scope": "admin"}

    @get(
        "/",
        summary="Invoices of this organisation",
        description=(
            "Issued invoices and credit notes, newest month first, without their lines. Amounts "
            "are integer minor units of `currency` (cents). An invoice is issued for each UTC "
            "month a few hours after it ends; it never changes, a correction is a credit note "
            "(docs/billing.md)."
        ),
    )
    async def list_invoices(
        self, request: Request[Any, Any, Any], billing: NamedDependency[Billing]
    ) -> InvoiceList:
        """Every issued document of the key's organisation."""
        return await billing.invoices(auth_context(request).organisation_id)

    @get(
        "/{number:str}",
        summary="One invoice or credit note, with its lines",
        description=(
            "The base price line, one line per project and environment with usage (its "
            "quantities and the amount above the allowance), or a credit note's negative lines. "
            "404 `INVOICE_NOT_FOUND` for a number this organisation was not issued."
        ),
    )
    async def get_invoice(
        self,
        request: Request[Any, Any, Any],
        billing: NamedDependency[Billing],
        number: FromPath[str],
    ) -> InvoiceView:
        """404 ``INVOICE_NOT_FOUND`` unless the number is one of the organisation's."""
        return await billing.invoice(number, auth_context(request).organisation_id)
