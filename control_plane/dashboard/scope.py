"""The environment a dashboard request works in, resolved from the signed-in user's memberships."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from litestar import Request

from control_plane.dashboard.sessions import session_of
from control_plane.edge.resources import resources_of
from data_plane.groups.service import Conn
from observability.logging import bind
from tenants import access as tenant_access
from tenants.access import EnvironmentAccess


@asynccontextmanager
async def environment(
    request: Request[Any, Any, Any], environment_id: str, action: str | None = None
) -> AsyncIterator[tuple[Conn, EnvironmentAccess]]:
    """One transaction in an environment of the user's organisations (404 for any other), after
    checking that their role may perform ``action`` (403 otherwise); committed on success."""
    user_id = session_of(request).user_id
    async with resources_of(request.app).db.connection() as conn:
        access = await tenant_access.environment_access(conn, user_id, environment_id)
        bind(organisation_id=access.organisation.id, environment_id=environment_id)
        if action is not None:
            access.require(action)
        yield conn, access
