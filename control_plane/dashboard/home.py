"""The dashboard's home: the user's organisations, their projects and environments."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, get
from litestar.di import NamedDependency
from litestar.params import FromPath
from litestar.response import Redirect

from control_plane.dashboard.pages import PREFIX, env_path, page, redirect
from control_plane.dashboard.scope import environment
from control_plane.dashboard.sessions import require_session, session_of
from tenants.team.service import TeamService


@get("/", include_in_schema=False)
async def root() -> Redirect:
    """The bare server URL (what ``queuecore dev`` prints) leads to the dashboard."""
    return Redirect(path=f"{PREFIX}/", status_code=303)


class HomePages(Controller):
    """``/dashboard/``: pick an organisation's project and environment."""

    path = PREFIX
    guards = [require_session]
    include_in_schema = False

    @get("/")
    async def home(
        self, request: Request[Any, Any, Any], team: NamedDependency[TeamService]
    ) -> Response[Any]:
        """Every organisation of the user with its projects' environments."""
        found = await team.workspaces(session_of(request).user_id)
        return page(request, "home.html", workspaces=found)

    @get("/envs/{env_id:str}")
    async def environment_home(
        self, request: Request[Any, Any, Any], env_id: FromPath[str]
    ) -> Response[Any]:
        """An environment opens on its topics."""
        await environment(request, env_id)
        return redirect(env_path(env_id, "topics"))
