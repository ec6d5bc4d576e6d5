"""The console's test push: a button on a push group's page that sends a signed test push to
the endpoint now and shows what came back (the panel itself: ``push_panel``)."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, post
from litestar.di import NamedDependency
from litestar.params import FromPath

from control_plane.dashboard.group_page import render_group
from control_plane.dashboard.scope import caller, topic_manager
from control_plane.dashboard.sessions import require_csrf, require_session
from data_plane.service import DataPlane


class PushPages(Controller):
    """``POST …/groups/{group}/push/test``: a test push, by a role that manages topics."""

    path = "/dashboard/envs/{env_id:str}/topics/{topic:str}/groups/{group:str}/push"
    guards = [require_session, require_csrf]
    include_in_schema = False

    @post("/test")
    async def test_push(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        env_id: FromPath[str],
        topic: FromPath[str],
        group: FromPath[str],
    ) -> Response[Any]:
        """POST a ``push.test`` event, signed, to the group's endpoint; the page shows how it went."""
        access, _ = await topic_manager(request, env_id)
        tested = await data_plane.push.test(caller(access), topic, group)
        return await render_group(request, env_id, topic, group, tested=tested)
