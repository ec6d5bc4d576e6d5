"""The environment's usage this month, per day: what ``GET /v1/usage`` reports, for owners and
admins (the API asks for the admin scope)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from litestar import Controller, Request, Response, get
from litestar.params import FromPath, QueryParameter

from billing import usage
from control_plane.dashboard.charts import usage_chart
from control_plane.dashboard.pages import page
from control_plane.dashboard.scope import environment
from control_plane.dashboard.sessions import require_session
from control_plane.edge.resources import billing_of


class UsagePages(Controller):
    """``/dashboard/envs/{env}/usage``: messages, bytes, requests and storage by day."""

    path = "/dashboard/envs/{env_id:str}/usage"
    guards = [require_session]
    include_in_schema = False

    @get("/")
    async def show(
        self,
        request: Request[Any, Any, Any],
        env_id: FromPath[str],
        month: Annotated[str | None, QueryParameter()] = None,
    ) -> Response[Any]:
        """A month (``YYYY-MM``, default the current one) by UTC day, with its totals."""
        window = usage.usage_window(*_month_bounds(month), "day", datetime.now(UTC))
        access = await environment(request, env_id, "view_usage")
        metered = usage.MeteredEnvironment(
            env_id, access.environment.name, access.project.id, access.organisation.id
        )
        report = await billing_of(request.app).usage_report(metered, window)
        return page(
            request,
            "usage.html",
            access=access,
            section="usage",
            report=report,
            month=month,
            chart=usage_chart(report),
        )


def _month_bounds(month: str | None) -> tuple[str | None, str | None]:
    """``from`` and ``to`` of ``YYYY-MM`` for :func:`billing.usage.usage_window` (its own
    checks then say what is wrong with a bad value); no month: the current one."""
    if not month:
        return None, None
    year, _, number = month.partition("-")
    if not (year.isdigit() and number.isdigit() and 1 <= int(number) <= 12):
        return month, None  # rejected by usage_window as a bad 'from'
    following = f"{int(year) + 1:04d}-01" if int(number) == 12 else f"{year}-{int(number) + 1:02d}"
    return f"{month}-01", f"{following}-01"
