"""The environment a dashboard request works in, resolved from the signed-in user's memberships."""

from __future__ import annotations

from typing import Any

from litestar import Request

from control_plane.dashboard.sessions import session_of
from control_plane.edge.resources import team_of
from data_plane.service import Scope
from observability.logging import bind
from tenants.access import EnvironmentAccess
from tenants.team.audit import Actor


async def environment(
    request: Request[Any, Any, Any], environment_id: str, action: str | None = None
) -> EnvironmentAccess:
    """An environment of the user's organisations (404 for any other), once their role is
    checked to allow ``action`` (403 otherwise)."""
    user_id = session_of(request).user_id
    access = await team_of(request.app).environment(user_id, environment_id, action)
    bind(organisation_id=access.organisation.id, environment_id=environment_id)
    return access


def caller(access: EnvironmentAccess) -> Scope:
    """Who the data plane serves for a page: the environment the user works in."""
    return Scope(access.organisation.id, access.environment.id)


async def topic_manager(
    request: Request[Any, Any, Any], environment_id: str
) -> tuple[EnvironmentAccess, Actor]:
    """The environment, if the user's role may manage topics (403 otherwise), and the user as
    the audit log names them."""
    access = await environment(request, environment_id, "manage_topics")
    session = session_of(request)
    return access, Actor.user(session.user_id, session.email)
