"""``GET /v1/usage`` (admin scope): the metered usage of the caller's environment.

Publishes and deliveries (pull, stream, browse) are metered by the data plane, requests by the
rate-limit middleware: all into the process's :class:`billing.meter.UsageMeter`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from litestar import Controller, Request, get
from litestar.di import NamedDependency
from litestar.params import QueryParameter

from billing import usage
from billing.schemas import UsageReport
from billing.service import Billing
from control_plane.edge.auth import auth_context


class UsageController(Controller):
    """The metered usage of the caller's environment."""

    path = "/usage"
    tags = ["usage"]
    opt = {"scope": "admin"}

    @get(
        "/",
        summary="Usage of this environment",
        description=(
            "Messages and payload bytes published (`messagesIn`, `bytesIn`) and delivered "
            "(`messagesOut`, `bytesOut`), requests by category and stored bytes "
            "(`storageByteHours`, `storageBytesMax`), per UTC `hour` or `day` of `[from, to)`, "
            "every bucket listed, and in total; with the organisation's tier and limits. "
            "Default window: the current calendar month. Counts reach the table within a few "
            "seconds (docs/billing.md)."
        ),
    )
    async def usage(
        self,
        request: Request[Any, Any, Any],
        billing: NamedDependency[Billing],
        from_: Annotated[
            str | None,
            QueryParameter(
                name="from",
                description="ISO 8601 date or time, UTC if no offset; default: start of month",
            ),
        ] = None,
        to: Annotated[
            str | None,
            QueryParameter(description="ISO 8601 date or time, exclusive; default: next month"),
        ] = None,
        granularity: Annotated[
            str | None, QueryParameter(description="`hour` or `day` (default)")
        ] = None,
    ) -> UsageReport:
        """422 ``VALIDATION_ERROR`` for a bad date, granularity or window."""
        window = usage.usage_window(from_, to, granularity, datetime.now(UTC))
        ctx = auth_context(request)
        environment = usage.MeteredEnvironment(
            ctx.environment_id, ctx.environment, ctx.project_id, ctx.organisation_id
        )
        return await billing.usage_report(environment, window)
