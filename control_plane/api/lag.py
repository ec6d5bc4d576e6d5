"""``/v1/topics/{topic}/groups/{group}/lag``: a group's lag, rates and time to drain over time."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from litestar import Controller, Request, get
from litestar.di import NamedDependency
from litestar.params import FromPath, QueryParameter

from control_plane.edge.auth import auth_context
from data_plane.service import DataPlane, LagSeries


class LagController(Controller):
    """The series the lag analytics job computes from the per-minute lag snapshots."""

    path = "/topics/{topic:str}/groups/{group:str}/lag"
    tags = ["consumer groups"]
    opt = {"scope": "consume"}

    @get("/", summary="A consumer group's lag, consume and produce rates and time to drain")
    async def series(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: FromPath[str],
        group: FromPath[str],
        since: Annotated[
            datetime | None,
            QueryParameter(description="ISO 8601, UTC if no offset; default: until - 1 h"),
        ] = None,
        until: Annotated[
            datetime | None, QueryParameter(description="ISO 8601, UTC if no offset; default: now")
        ] = None,
    ) -> LagSeries:
        """One point per minute in ``[since, until)``: ``{at, lag, consumeRate, produceRate,
        timeToDrainS}``, rates in messages per second, ``null`` where unknown or not draining."""
        return await data_plane.groups.lag(auth_context(request), topic, group, since, until)
