"""Rendering dashboard pages: the Jinja environment, the context every page gets, redirects with
notices, and reading form fields."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from litestar import Request
from litestar.datastructures import Cookie
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.response import Redirect, Template
from litestar.template import TemplateConfig

from control_plane.dashboard.sessions import session_of
from control_plane.edge.bodies import read_form
from core import settings
from tenants.access import ACTIONS, EnvironmentAccess, allows
from tenants.sessions import Session, SessionRequired
from tenants.team.models import OrganisationAccess

PREFIX = "/dashboard"
TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"
MAX_FIELD_CHARS = 4096  # longer form values are cut: no field of the dashboard needs more

# Every page, error pages included: everything comes from this origin (inline SVG is markup, so
# it needs no exception), and no other site may frame a page.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}

# What a redirect's ``notice`` query parameter may say: fixed texts, so a link cannot put words
# of its own on the page. ``{count}`` comes from the ``count`` parameter, as a number.
NOTICES = {
    "welcome": "Your organisation is ready. This is the development environment of its default "
    "project: create an API key to start publishing.",
    "signed-out": "You are signed out.",
    "session-ended": "Your session has ended; sign in again.",
    "key-revoked": "The API key was revoked: requests with it fail within a few seconds.",
    "topic-created": "The topic was created.",
    "replayed": "Replayed {count} dead-lettered message(s) to the group's consumers.",
    "alert-saved": "The alert endpoint was saved.",
    "alert-deleted": "The alert endpoint was removed: no DLQ alerts are sent until you set one.",
    "message-sent": "The test message was stored at offset {count} of this partition.",
    "invited": "The invitation was emailed. Its link works once, for 7 days.",
    "invitation-revoked": "The invitation was revoked: its link no longer works.",
    "role-changed": "The role was changed.",
    "member-removed": "The member was removed and signed out everywhere.",
    "joined": "Welcome: you joined the organisation.",
    "reset-sent": "If an account uses that email, a link to choose a new password is on its "
    "way. It works once, for an hour.",
    "password-reset": "Your new password is set and you are signed in. Every other session of "
    "your account was signed out.",
    "topic-updated": "The topic was updated.",
    "topic-deleted": "The topic was deleted: its name is free now, and its messages are removed "
    "in the background.",
    "group-configured": "The consumer group's settings were saved.",
    "fairness-saved": "The group's fair scheduling was saved.",
    "hook-saved": "The topic's onEnqueue hook was saved.",
    "config-saved": "The configuration key was saved: every replica uses it within seconds.",
    "config-deleted": "The configuration key was deleted.",
}


def dashboard_templates() -> TemplateConfig[JinjaTemplateEngine]:
    """The dashboard's Jinja templates, autoescaped, failing loudly on an undefined name."""
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = format_when
    return TemplateConfig(instance=JinjaTemplateEngine.from_environment(env))


def format_when(value: datetime | None) -> str:
    """A timestamp as the dashboard prints it, in UTC to the second."""
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def current_session(request: Request[Any, Any, Any]) -> Session | None:
    """The signed-in user of a page, if a guard resolved one."""
    try:
        return session_of(request)
    except SessionRequired:
        return None


def page(
    request: Request[Any, Any, Any],
    template: str,
    *,
    status: int = 200,
    access: EnvironmentAccess | None = None,
    org: OrganisationAccess | None = None,
    headers: dict[str, str] | None = None,
    cookies: list[Cookie] | None = None,
    **context: Any,
) -> Template:
    """A page with what the layout needs: user, CSRF token, environment (or organisation) and
    role, notice."""
    session = current_session(request)
    role = access.role if access else org.role if org else None
    base: dict[str, Any] = {
        "user": session,
        "csrf": session.csrf_token if session else "",
        "access": access,
        "org": org,
        "signup_open": settings.signup_open(),
        "can": {action: allows(role, action) for action in ACTIONS} if role else {},
        "section": None,
        "notice": notice_of(request),
        "error": None,
        "prefix": PREFIX,
    }
    return Template(
        template_name=template,
        context={**base, **context},
        status_code=status,
        headers={**SECURITY_HEADERS, **(headers or {})},
        cookies=cookies,
    )


def notice_of(request: Request[Any, Any, Any]) -> str | None:
    """The text of a known ``notice`` in the query string."""
    text = NOTICES.get(request.query_params.get("notice", ""))
    if text is None or "{count}" not in text:
        return text
    count = request.query_params.get("count", "")
    return text.format(count=int(count)) if count.isdigit() and len(count) < 10 else None


def redirect(
    path: str, *, notice: str | None = None, cookies: list[Cookie] | None = None, **params: Any
) -> Redirect:
    """303 to a dashboard path (after a form post), with a notice to show there."""
    query = {"notice": notice, **params} if notice else params
    suffix = f"?{urlencode(query)}" if query else ""
    return Redirect(path=f"{path}{suffix}", status_code=303, cookies=cookies)


def env_path(environment_id: str, *parts: str) -> str:
    """``/dashboard/envs/{id}/…``."""
    return "/".join([PREFIX, "envs", environment_id, *parts])


async def form_fields(request: Request[Any, Any, Any]) -> dict[str, list[str]]:
    """Every field of a posted form (read within limits: :func:`read_form`), values cut to
    :data:`MAX_FIELD_CHARS`."""
    form = await read_form(request)
    return {key: [value[:MAX_FIELD_CHARS] for value in values] for key, values in form.items()}


def field(fields: dict[str, list[str]], name: str, *, strip: bool = True) -> str:
    """The first value of a form field, stripped unless told not to ('' when absent)."""
    value = (fields.get(name) or [""])[0]
    return value.strip() if strip else value


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a dashboard path only, never another site."""
    if (
        target
        and target.startswith(PREFIX + "/")
        and "//" not in target
        and "\\" not in target
        and len(target) <= 1000
    ):
        return target
    return PREFIX + "/"
