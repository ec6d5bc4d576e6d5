"""``/v1/alerts/endpoint``: where the environment's DLQ alert webhooks go (admin scope)."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, delete, get, put
from litestar.di import NamedDependency
from litestar.params import Body

from control_plane.edge.auth import auth_context
from data_plane.service import AlertEndpoint, AlertEndpointRequest, AlertEndpointView, DataPlane


def endpoint_view(endpoint: AlertEndpoint) -> AlertEndpointView:
    """Render an endpoint; ``secret`` only when the call made it."""
    return AlertEndpointView(
        url=endpoint.url,
        secret_hint=endpoint.secret_hint,
        created_at=endpoint.created_at,
        updated_at=endpoint.updated_at,
        secret_created_at=endpoint.secret_created_at,
        secret=endpoint.secret,
    )


class AlertsController(Controller):
    """Get, set and remove the alert webhook endpoint of the calling key's environment."""

    path = "/alerts/endpoint"
    tags = ["alerts"]
    opt = {"scope": "admin"}

    @get("/", summary="The alert webhook endpoint (its secret as a hint only)")
    async def get_endpoint(
        self, request: Request[Any, Any, Any], data_plane: NamedDependency[DataPlane]
    ) -> AlertEndpointView:
        """404 ``ALERT_ENDPOINT_NOT_FOUND`` when none is configured."""
        return endpoint_view(await data_plane.dead_letters.alert_endpoint(auth_context(request)))

    @put("/", summary="Set the alert webhook endpoint; a new secret is in this response only")
    async def put_endpoint(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        data: Annotated[AlertEndpointRequest, Body()],
    ) -> AlertEndpointView:
        """A signing secret is made on creation, and again with ``rotateSecret``."""
        endpoint = await data_plane.dead_letters.set_alert_endpoint(
            auth_context(request), data.url, rotate_secret=data.rotate_secret
        )
        return endpoint_view(endpoint)

    @delete("/", summary="Remove the alert webhook endpoint")
    async def delete_endpoint(
        self, request: Request[Any, Any, Any], data_plane: NamedDependency[DataPlane]
    ) -> None:
        """Alerts keep being raised and re-armed, but none is sent."""
        await data_plane.dead_letters.delete_alert_endpoint(auth_context(request))
