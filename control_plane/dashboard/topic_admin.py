"""Managing topics and consumer groups from their pages: create, change (partitions up,
retention, latency class), delete with the name typed as confirmation, and configure a group.

Owners, admins and developers may; the checks are the data plane's, the same as
``PATCH``/``DELETE /v1/topics/{topic}`` and ``PUT …/groups/{group}``, and every change lands in
the organisation's audit log under the signed-in user.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, Request, Response, post
from litestar.background_tasks import BackgroundTask
from litestar.di import NamedDependency
from litestar.params import FromPath

from control_plane.dashboard.group_page import render_group
from control_plane.dashboard.pages import env_path, field, form_fields, redirect
from control_plane.dashboard.scope import caller, topic_manager
from control_plane.dashboard.sessions import require_csrf, require_session
from control_plane.dashboard.topic_page import render_topic
from control_plane.edge.errors import status_for
from core.errors import ClientError, ValidationFailed
from data_plane.service import DataPlane, GroupConfigRequest

GROUP_FIELDS = (
    "start_from",
    "ack_timeout",
    "max_in_flight",
    "session_timeout",
    "max_retries",
    "retry_delay",
    "alert_threshold",
)


def parse_topic_settings(fields: dict[str, list[str]]) -> dict[str, Any]:
    """The settings form as the changes of ``DataPlane.topics.update``."""
    partitions = field(fields, "partitions")
    if not partitions.isdigit() or len(partitions) > 6:
        raise ValidationFailed("partitions must be a whole number", field="partitions")
    return {
        "partitions": int(partitions),
        "retention": field(fields, "retention") or None,
        "latency_class": field(fields, "latency_class") or None,
    }


def parse_group_settings(fields: dict[str, list[str]]) -> GroupConfigRequest:
    """The group form, checked by the API's own request schema."""
    value = {name: field(fields, name) for name in GROUP_FIELDS}
    body = {
        "startFrom": value["start_from"] or "latest",
        "ackTimeout": value["ack_timeout"] or "30s",
        "maxInFlight": value["max_in_flight"] or "1000",
        "sessionTimeout": value["session_timeout"] or "30s",
        "deadLetter": {
            "maxRetries": value["max_retries"] or "5",
            "retryDelay": value["retry_delay"] or "30s",
            "alertThreshold": value["alert_threshold"] or None,
        },
    }
    try:
        return msgspec.convert(body, GroupConfigRequest, strict=False)
    except msgspec.ValidationError as exc:
        raise ValidationFailed(_readable(str(exc))) from None


def _readable(message: str) -> str:
    """msgspec's ``… - at `$.deadLetter.maxRetries``` as the form's field names say it."""
    text, _, where = message.partition(" - at `$.")
    return f"{where.rstrip('`').split('.')[-1]}: {text}" if where else text


class TopicAdminPages(Controller):
    """``POST …/topics/{topic}/settings``, ``…/delete`` and ``…/groups/{group}/settings``."""

    path = "/dashboard/envs/{env_id:str}/topics/{topic:str}"
    guards = [require_session, require_csrf]
    include_in_schema = False

    @post("/settings")
    async def update(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        env_id: FromPath[str],
        topic: FromPath[str],
    ) -> Response[Any]:
        """Raise partitions, change retention or latency class."""
        access, actor = await topic_manager(request, env_id)
        fields = await form_fields(request)
        try:
            changes = parse_topic_settings(fields)
            await data_plane.topics.update(caller(access), topic, actor, **changes)
        except ClientError as exc:
            if exc.code.endswith("NOT_FOUND"):
                raise
            return await render_topic(
                request, env_id, topic, status=status_for(exc), settings_error=exc.message
            )
        return redirect(env_path(env_id, "topics", topic), notice="topic-updated")

    @post("/delete")
    async def delete(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        env_id: FromPath[str],
        topic: FromPath[str],
    ) -> Response[Any]:
        """Delete once the topic's name was typed; its data goes in the background."""
        access, actor = await topic_manager(request, env_id)
        if field(await form_fields(request), "confirm") != topic:
            problem = f"Type the topic's name, {topic}, to delete it."
            return await render_topic(request, env_id, topic, status=422, delete_error=problem)
        deleted = await data_plane.topics.delete(caller(access), topic, actor)
        answer = redirect(env_path(env_id, "topics"), notice="topic-deleted")
        answer.background = BackgroundTask(data_plane.topics.queue_cleanup, deleted.id)
        return answer

    @post("/groups/{group:str}/settings")
    async def configure_group(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        env_id: FromPath[str],
        topic: FromPath[str],
        group: FromPath[str],
    ) -> Response[Any]:
        """Start, ack timeout, in-flight window, session timeout, dead letters, alert level."""
        access, actor = await topic_manager(request, env_id)
        fields = await form_fields(request)
        try:
            settings = parse_group_settings(fields)
            await data_plane.groups.configure(caller(access), topic, group, settings, actor)
        except ClientError as exc:
            if exc.code.endswith("NOT_FOUND"):
                raise
            form = {name: field(fields, name) for name in GROUP_FIELDS}
            return await render_group(
                request, env_id, topic, group, status=status_for(exc), error=exc.message, form=form
            )
        path = env_path(env_id, "topics", topic, "groups", group)
        return redirect(path, notice="group-configured")
