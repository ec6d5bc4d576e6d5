"""Billing's door for the edges: an environment's metered usage, an organisation's invoices, and
the background work (storage samples, issuing a month's invoices, credit notes). Each call runs on
a connection of its own: pooled in the API, a fresh autocommit one in a task or a CLI command,
where invoicing commits organisation by organisation."""

from __future__ import annotations

from datetime import date, datetime

from billing import invoicing, usage
from billing.invoice_schemas import InvoiceList, InvoiceView
from billing.invoicing import IssueReport
from billing.schemas import UsageReport
from billing.usage import MeteredEnvironment, UsageWindow
from core.db import Database


class Billing:
    """Usage reports, invoices and credit notes."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def usage_report(
        self, environment: MeteredEnvironment, window: UsageWindow
    ) -> UsageReport:
        """The environment's usage per bucket of ``window`` and in total, with its tier."""
        async with self._db.connection() as conn:
            return await usage.usage_report(conn, environment, window)

    async def invoices(self, organisation_id: str) -> InvoiceList:
        """The organisation's issued invoices and credit notes, newest month first."""
        async with self._db.connection() as conn:
            return await invoicing.list_invoices(conn, organisation_id)

    async def invoice(self, number: str, organisation_id: str) -> InvoiceView:
        """One of the organisation's documents with its lines (another's is not found)."""
        async with self._db.connection() as conn:
            return await invoicing.get_invoice(conn, number, organisation_id)

    async def sample_storage(self, environment_id: str | None = None) -> int:
        """Add this slot's sample of every environment's (or one's) stored bytes to its hourly
        usage; environments sampled (0 when the slot was sampled already)."""
        async with self._db.connection() as conn:
            return await usage.sample_storage(conn, environment_id=environment_id)

    async def issue_month(
        self, month: date, now: datetime, organisation_id: str | None = None
    ) -> IssueReport:
        """Issue the month's invoice of every billed organisation (or one) that has none yet."""
        async with self._db.connection() as conn:
            return await invoicing.issue_month(conn, month, now, organisation_id=organisation_id)

    async def credit_note(
        self, number: str, reason: str, now: datetime, amount_cents: int | None = None
    ) -> InvoiceView:
        """Credit ``amount_cents`` of an invoice (all that is left if None): a new document."""
        async with self._db.connection() as conn:
            return await invoicing.issue_credit_note(
                conn, number, reason, now, amount_cents=amount_cents
            )
