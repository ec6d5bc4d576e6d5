"""Fair scheduling in the dashboard: a group's fairness and ``onFailure`` hook, a topic's
``onEnqueue`` hook, and the environment's runtime configuration (throttle rates and the rest).

Reading is for everyone in the environment; changing needs the role that manages topics. The
checks and the writes are the data plane's, the same as ``PUT …/groups/{group}``, ``PATCH
/v1/topics/{topic}`` and ``/v1/config``, and hook sources are compiled there (``INVALID_HOOK``).
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath

from control_plane.dashboard.group_page import render_group
from control_plane.dashboard.pages import env_path, field, form_fields, page, redirect
from control_plane.dashboard.scope import caller, environment, topic_manager
from control_plane.dashboard.sessions import require_csrf, require_session
from control_plane.dashboard.topic_page import render_topic
from control_plane.edge.bodies import read_form
from control_plane.edge.errors import status_for
from control_plane.edge.resources import data_plane_of
from core.errors import ClientError, ValidationFailed
from data_plane.service import DataPlane, GroupConfigRequest

MAX_HOOK_CHARS = 16_384


def parse_weights(text: str) -> dict[str, int]:
    """``key=weight`` lines (blank lines ignored) as the group's weights."""
    weights: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, sep, weight = line.rpartition("=")
        if not sep or not weight.strip().isdigit():
            raise ValidationFailed(f"weights, line {number}: write key=weight", field="weights")
        weights[key.strip()] = int(weight)
    return weights


def fairness_body(
    current: dict[str, Any], fields: dict[str, list[str]], hook: str
) -> GroupConfigRequest:
    """The group's current settings with the form's fairness and hook, as a ``PUT`` body."""
    body = {key: value for key, value in current.items() if key not in ("fairness", "onFailure")}
    if field(fields, "fair") == "on":
        body["fairness"] = {
            "weights": parse_weights(field(fields, "weights", strip=False)),
            "defaultWeight": field(fields, "default_weight") or "1",
            "quantum": field(fields, "quantum") or "1",
        }
    else:
        body["fairness"] = None
    body["onFailure"] = hook.strip() or None
    try:
        return msgspec.convert(body, GroupConfigRequest, strict=False)
    except msgspec.ValidationError as exc:
        raise ValidationFailed(str(exc).replace(" - at `$.", " (").rstrip("`") + ")") from None


async def _hook_field(request: Request[Any, Any, Any], name: str) -> str:
    """A hook's source from the posted form, up to :data:`MAX_HOOK_CHARS` (longer is refused)."""
    text = ((await read_form(request)).get(name) or [""])[0]
    if len(text) > MAX_HOOK_CHARS:
        raise ValidationFailed(f"a hook is at most {MAX_HOOK_CHARS} characters", field=name)
    return text


class FairPages(Controller):
    """``POST …/groups/{group}/fairness`` and ``POST …/topics/{topic}/hook``."""

    path = "/dashboard/envs/{env_id:str}/topics/{topic:str}"
    guards = [require_session, require_csrf]
    include_in_schema = False

    @post("/groups/{group:str}/fairness")
    async def configure_fairness(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        env_id: FromPath[str],
        topic: FromPath[str],
        group: FromPath[str],
    ) -> Response[Any]:
        """Fairness on or off, its weights, default weight and quantum; the onFailure hook."""
        access, actor = await topic_manager(request, env_id)
        fields = await form_fields(request)
        try:
            hook = await _hook_field(request, "on_failure")
            current = (await data_plane.groups.describe(caller(access), topic, group)).config
            body = fairness_body(current, fields, hook)
            await data_plane.groups.configure(caller(access), topic, group, body, actor)
        except ClientError as exc:
            if exc.code.endswith("NOT_FOUND"):
                raise
            return await render_group(
                request, env_id, topic, group, status=status_for(exc), fairness_error=exc.message
            )
        path = env_path(env_id, "topics", topic, "groups", group)
        return redirect(path, notice="fairness-saved")

    @post("/hook")
    async def set_hook(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        env_id: FromPath[str],
        topic: FromPath[str],
    ) -> Response[Any]:
        """Set the topic's onEnqueue hook, or remove it (an empty source)."""
        access, actor = await topic_manager(request, env_id)
        try:
            source = (await _hook_field(request, "on_enqueue")).strip() or None
            await data_plane.topics.update(caller(access), topic, actor, on_enqueue=source)
        except ClientError as exc:
            if exc.code.endswith("NOT_FOUND"):
                raise
            return await render_topic(
                request, env_id, topic, status=status_for(exc), hook_error=exc.message
            )
        return redirect(env_path(env_id, "topics", topic), notice="hook-saved")


class ConfigPages(Controller):
    """``/dashboard/envs/{env}/config``: the runtime configuration, listed, set and deleted."""

    path = "/dashboard/envs/{env_id:str}/config"
    guards = [require_session, require_csrf]
    include_in_schema = False

    @get("/")
    async def show(self, request: Request[Any, Any, Any], env_id: FromPath[str]) -> Response[Any]:
        """Every key with its value, and the form to set one."""
        return await render_config(request, env_id)

    @post("/")
    async def set_entry(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        env_id: FromPath[str],
    ) -> Response[Any]:
        """Create or replace a key."""
        access, _ = await topic_manager(request, env_id)
        fields = await form_fields(request)
        key, value = field(fields, "key"), field(fields, "value", strip=False)
        try:
            await data_plane.config.put(caller(access), key, value)
        except ClientError as exc:
            form = {"key": key, "value": value}
            return await render_config(
                request, env_id, status=status_for(exc), error=exc.message, form=form
            )
        return redirect(env_path(env_id, "config"), notice="config-saved")

    @post("/delete")
    async def delete_entry(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        env_id: FromPath[str],
    ) -> Response[Any]:
        """Remove a key."""
        access, _ = await topic_manager(request, env_id)
        key = field(await form_fields(request), "key")
        try:
            await data_plane.config.delete(caller(access), key)
        except ClientError as exc:
            return await render_config(request, env_id, status=status_for(exc), error=exc.message)
        return redirect(env_path(env_id, "config"), notice="config-deleted")


async def render_config(
    request: Request[Any, Any, Any],
    env_id: str,
    *,
    status: int = 200,
    error: str | None = None,
    form: dict[str, str] | None = None,
) -> Response[Any]:
    """The runtime configuration page."""
    access = await environment(request, env_id)
    listed = await data_plane_of(request.app).config.list_all(caller(access))
    return page(
        request,
        "config.html",
        status=status,
        access=access,
        section="config",
        error=error,
        entries=listed.entries,
        form=form or {"key": "", "value": ""},
    )
