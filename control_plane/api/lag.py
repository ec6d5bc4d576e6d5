"""``/v1/topics/{topic}/groups/{group}/lag``: a group's lag, rates and time to drain over time."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, get
from litestar.di import NamedDependency
from litestar.params import FromPath, QueryParameter

from control_plane.edge.auth import auth_context
from core.errors import ValidationFailed
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
            str | None,
            QueryParameter(
                description="RFC 3339 date-time, UTC if no offset; default: until - 1 h"
            ),
        ] = None,
        until: Annotated[
            str | None,
            QueryParameter(description="RFC 3339 date-time, UTC if no offset; default: now"),
        ] = None,
    ) -> LagSeries:
        """One point per minute in ``[since, until)``: ``{at, lag, consumeRate, produceRate,
        timeToDrainS}``, rates in messages per second, ``null`` where unknown or not draining.
        422 when ``since`` is not before ``until``."""
        start, end = instant(since, "since"), instant(until, "until")
        return await data_plane.groups.lag(auth_context(request), topic, group, start, end)


def instant(text: str | None, field: str) -> datetime | None:
    """An RFC 3339 date-time (``2026-01-31T12:00:00Z``), as the document says: a number such as
    ``0.5`` is not one, whatever a lenient parser would make of it."""
    if text is None:
        return None
    try:
        return msgspec.convert(text, datetime)
    except msgspec.ValidationError:
        raise ValidationFailed(
            f"{field} must be an RFC 3339 date-time such as 2026-01-31T12:00:00Z", field=field
        ) from None
