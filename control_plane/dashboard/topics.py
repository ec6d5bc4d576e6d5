"""An environment's topics (list, create, describe) and a consumer group's page."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath

from control_plane.dashboard.group_page import render_group
from control_plane.dashboard.pages import env_path, field, form_fields, page, redirect
from control_plane.dashboard.scope import caller, environment
from control_plane.dashboard.sessions import require_csrf, require_session, session_of
from control_plane.dashboard.topic_page import render_topic
from control_plane.edge.errors import status_for
from control_plane.edge.resources import data_plane_of
from core.errors import Conflict, ValidationFailed
from data_plane.service import DELIVERIES, LATENCY_CLASSES, DataPlane
from tenants.team.audit import Actor
from tenants.team.service import TeamService

TOPIC_FORM_DEFAULTS = {
    "name": "",
    "partitions": "3",
    "retention": "7d",
    "delivery": "exactly-once",
    "latency_class": "express",
}


def parse_topic_form(fields: dict[str, list[str]]) -> dict[str, Any]:
    """The create form as the keyword arguments of ``DataPlane.topics.create``."""
    partitions = field(fields, "partitions") or TOPIC_FORM_DEFAULTS["partitions"]
    if not partitions.isdigit() or len(partitions) > 6:
        raise ValidationFailed("partitions must be a whole number", field="partitions")
    return {
        "name": field(fields, "name"),
        "partitions": int(partitions),
        "retention": field(fields, "retention") or TOPIC_FORM_DEFAULTS["retention"],
        "delivery": field(fields, "delivery") or TOPIC_FORM_DEFAULTS["delivery"],
        "latency_class": field(fields, "latency_class") or TOPIC_FORM_DEFAULTS["latency_class"],
    }


class TopicPages(Controller):
    """``/dashboard/envs/{env}/topics``: everyone sees; owners, admins and developers create."""

    path = "/dashboard/envs/{env_id:str}/topics"
    guards = [require_session, require_csrf]
    include_in_schema = False

    @get("/")
    async def list_topics(
        self, request: Request[Any, Any, Any], env_id: FromPath[str]
    ) -> Response[Any]:
        """Topics with partitions, retention, delivery and depth; the create form."""
        return await render_topics(request, env_id)

    @post("/")
    async def create_topic(
        self,
        request: Request[Any, Any, Any],
        team: NamedDependency[TeamService],
        data_plane: NamedDependency[DataPlane],
        env_id: FromPath[str],
    ) -> Response[Any]:
        """Create a topic; quota and naming problems are explained on the form."""
        fields = await form_fields(request)
        form = {key: field(fields, key) for key in TOPIC_FORM_DEFAULTS}
        session = session_of(request)
        try:
            access = await team.environment(session.user_id, env_id, "create_topics")
            options = parse_topic_form(fields)
            topic = await data_plane.topics.create(
                caller(access),
                options.pop("name"),
                Actor.user(session.user_id, session.email),
                **options,
            )
        except (ValidationFailed, Conflict) as exc:
            return await render_topics(
                request, env_id, status=status_for(exc), error=exc.message, form=form
            )
        return redirect(env_path(env_id, "topics", topic.name), notice="topic-created")

    @get("/{topic:str}")
    async def describe_topic(
        self, request: Request[Any, Any, Any], env_id: FromPath[str], topic: FromPath[str]
    ) -> Response[Any]:
        """A topic's partitions (offsets, depth), consumer groups (lag, dead letters), traffic
        rates and the test message form."""
        return await render_topic(request, env_id, topic)

    @get("/{topic:str}/groups/{group:str}")
    async def describe_group(
        self,
        request: Request[Any, Any, Any],
        env_id: FromPath[str],
        topic: FromPath[str],
        group: FromPath[str],
    ) -> Response[Any]:
        """Members, partitions with owner, committed offset and lag, dead letters, lag chart,
        settings."""
        return await render_group(request, env_id, topic, group)


async def render_topics(
    request: Request[Any, Any, Any],
    env_id: str,
    *,
    status: int = 200,
    error: str | None = None,
    form: dict[str, str] | None = None,
) -> Response[Any]:
    """The topics page, with a create form holding what was entered."""
    access = await environment(request, env_id)
    summaries = await data_plane_of(request.app).topics.summaries(caller(access))
    return page(
        request,
        "topics.html",
        status=status,
        access=access,
        section="topics",
        error=error,
        topics=summaries,
        form=form or TOPIC_FORM_DEFAULTS,
        deliveries=DELIVERIES,
        latency_classes=LATENCY_CLASSES,
    )
