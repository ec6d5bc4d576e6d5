"""``/v1/topics/{topic}/groups/{group}/push``: a push group's test push (admin scope)."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, post
from litestar.di import NamedDependency
from litestar.params import FromPath

from control_plane.edge.auth import auth_context
from data_plane.service import DataPlane, PushTestResult


class PushController(Controller):
    """Send a signed test push to a push group's endpoint and say what it answered."""

    path = "/topics/{topic:str}/groups/{group:str}/push"
    tags = ["consumer groups"]
    opt = {"scope": "admin"}

    @post(
        "/test",
        summary="Send a test push to a push group's endpoint",
        description=(
            "POSTs a `push.test` event (a message's shape, `data.test` true, not a message of the "
            "topic), signed with the group's secret, now, with a timeout of at most 10 s. 409 "
            "`NOT_A_PUSH_GROUP` for a group without push."
        ),
        status_code=200,
    )
    async def test_push(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
    ) -> PushTestResult:
        """Whether the endpoint answered 2xx, its status or the error, and how long it took."""
        outcome = await data_plane.push.test(auth_context(request), topic, group)
        return PushTestResult(
            delivered=outcome.ok,
            status_code=outcome.status_code,
            error=outcome.error,
            elapsed_ms=round(outcome.elapsed_s * 1000),
        )
