"""The environment's DLQ alert webhook endpoint: set (secret shown once), rotate, delete."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.params import FromPath

from control_plane.dashboard.pages import env_path, field, form_fields, page, redirect
from control_plane.dashboard.scope import caller, environment
from control_plane.dashboard.sessions import require_csrf, require_session
from control_plane.edge.errors import status_for
from control_plane.edge.resources import data_plane_of
from core.errors import ValidationFailed
from data_plane.service import AlertEndpoint, AlertEndpointNotFound

NO_STORE = {"Cache-Control": "no-store"}


class AlertPages(Controller):
    """``/dashboard/envs/{env}/alerts``: everyone sees; owners, admins and developers change."""

    path = "/dashboard/envs/{env_id:str}/alerts"
    guards = [require_session, require_csrf]
    include_in_schema = False

    @get("/")
    async def show(self, request: Request[Any, Any, Any], env_id: FromPath[str]) -> Response[Any]:
        """The endpoint's URL and secret hint, or the form to set one."""
        return await render_alerts(request, env_id)

    @post("/")
    async def set_endpoint(
        self, request: Request[Any, Any, Any], env_id: FromPath[str]
    ) -> Response[Any]:
        """Create or change the URL; a new endpoint's secret is shown on this page, once."""
        url = field(await form_fields(request), "url")
        access = await environment(request, env_id, "manage_alerts")
        try:
            endpoint = await data_plane_of(request.app).dead_letters.set_alert_endpoint(
                caller(access), url
            )
        except ValidationFailed as exc:
            return await render_alerts(
                request, env_id, status=status_for(exc), error=exc.message, url=url
            )
        if endpoint.secret is None:
            return redirect(env_path(env_id, "alerts"), notice="alert-saved")
        return await render_alerts(request, env_id, status=201, fresh=endpoint)

    @post("/rotate")
    async def rotate(self, request: Request[Any, Any, Any], env_id: FromPath[str]) -> Response[Any]:
        """A new signing secret, shown on this page once; the old one stops signing at once."""
        access = await environment(request, env_id, "manage_alerts")
        endpoint = await data_plane_of(request.app).dead_letters.rotate_alert_secret(caller(access))
        return await render_alerts(request, env_id, fresh=endpoint)

    @post("/delete")
    async def delete(self, request: Request[Any, Any, Any], env_id: FromPath[str]) -> Response[Any]:
        """Remove the endpoint: alerts are still raised, none is sent."""
        access = await environment(request, env_id, "manage_alerts")
        await data_plane_of(request.app).dead_letters.delete_alert_endpoint(caller(access))
        return redirect(env_path(env_id, "alerts"), notice="alert-deleted")


async def render_alerts(
    request: Request[Any, Any, Any],
    env_id: str,
    *,
    status: int = 200,
    error: str | None = None,
    url: str | None = None,
    fresh: AlertEndpoint | None = None,
) -> Response[Any]:
    """The alerts page (never cached: it may carry a secret just made)."""
    access = await environment(request, env_id)
    dead_letters = data_plane_of(request.app).dead_letters
    try:
        endpoint: AlertEndpoint | None = await dead_letters.alert_endpoint(caller(access))
    except AlertEndpointNotFound:
        endpoint = None
    return page(
        request,
        "alerts.html",
        status=status,
        access=access,
        headers=NO_STORE,
        section="alerts",
        error=error,
        endpoint=endpoint,
        url=url if url is not None else (endpoint.url if endpoint else ""),
        fresh=fresh,
    )
