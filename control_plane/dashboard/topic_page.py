"""The topic page: partitions, groups, traffic rates (``?window=hour|day``), the test message form."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response

from control_plane.dashboard.charts import format_rate, traffic_chart
from control_plane.dashboard.pages import page
from control_plane.dashboard.scope import caller, environment
from control_plane.edge.resources import data_plane_of
from data_plane.service import LATENCY_CLASSES, WINDOWS, TrafficWindow

SEND_FORM_DEFAULTS = {"data": '{"hello": "world"}', "key": "", "headers": ""}


def window_of(request: Request[Any, Any, Any]) -> TrafficWindow:
    """The traffic window a page asks for (``?window=day``); the last hour otherwise."""
    return WINDOWS.get(request.query_params.get("window", ""), WINDOWS["hour"])


async def render_topic(
    request: Request[Any, Any, Any],
    env_id: str,
    topic: str,
    *,
    status: int = 200,
    error: str | None = None,
    form: dict[str, str] | None = None,
    settings_error: str | None = None,
    delete_error: str | None = None,
    hook_error: str | None = None,
) -> Response[Any]:
    """The topic page, with the test message form holding what was entered (and the reason a
    change of settings or a deletion was refused)."""
    window = window_of(request)
    access = await environment(request, env_id)
    data_plane = data_plane_of(request.app)
    detail, traffic = await data_plane.topics.detail(caller(access), topic, window)
    on_enqueue = (await data_plane.topics.describe(caller(access), topic)).on_enqueue
    return page(
        request,
        "topic.html",
        status=status,
        access=access,
        section="topics",
        error=error,
        detail=detail,
        traffic=traffic,
        traffic_chart=traffic_chart(traffic),
        windows=WINDOWS.values(),
        rate=format_rate,
        send_form=form or SEND_FORM_DEFAULTS,
        settings_error=settings_error,
        delete_error=delete_error,
        latency_classes=LATENCY_CLASSES,
        on_enqueue=on_enqueue or "",
        hook_error=hook_error,
    )
