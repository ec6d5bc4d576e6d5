"""A consumer group's page: members, partitions with owner, committed offset and lag, dead
letters, the lag chart, and its settings form."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response

from control_plane.dashboard.charts import lag_chart
from control_plane.dashboard.pages import page
from control_plane.dashboard.push_panel import push_panel
from control_plane.dashboard.scope import caller, environment
from control_plane.edge.resources import data_plane_of
from data_plane.service import GroupView, PushOutcome


def settings_form(view: GroupView) -> dict[str, str]:
    """The settings form filled with the group's current configuration."""
    config: dict[str, Any] = view.config
    dead = config["deadLetter"]
    threshold = dead["alertThreshold"]
    return {
        "start_from": config["startFrom"],
        "ack_timeout": config["ackTimeout"],
        "max_in_flight": str(config["maxInFlight"]),
        "session_timeout": config["sessionTimeout"],
        "max_retries": str(dead["maxRetries"]),
        "retry_delay": dead["retryDelay"],
        "alert_threshold": "" if threshold is None else str(threshold),
    }


async def render_group(
    request: Request[Any, Any, Any],
    env_id: str,
    topic: str,
    group: str,
    *,
    status: int = 200,
    error: str | None = None,
    form: dict[str, str] | None = None,
    tested: PushOutcome | None = None,
    fairness_error: str | None = None,
) -> Response[Any]:
    """The group page, with the settings form holding what was entered (and, after a test
    push, what the endpoint answered)."""
    access = await environment(request, env_id)
    data_plane = data_plane_of(request.app)
    detail = await data_plane.groups.detail(caller(access), topic, group)
    view = await data_plane.groups.describe(caller(access), topic, group)  # with fairness
    stats = await data_plane.group_stats(caller(access), topic, group)
    return page(
        request,
        "group.html",
        status=status,
        access=access,
        section="topics",
        error=error,
        group=view,
        members=detail.state["members"],  # rows, with their heartbeat as a datetime
        lag=detail.lag,
        chart=lag_chart(detail.lag),
        total_lag=sum(partition.lag for partition in view.partitions),
        form=form or settings_form(view),
        push=await push_panel(data_plane, caller(access), view, tested),
        stats=stats,
        fairness=view.config.get("fairness"),
        on_failure=view.config.get("onFailure") or "",
        fairness_error=fairness_error,
    )
