"""An environment's API keys: list (hints only), create (the secret shown once), revoke."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath

from control_plane.dashboard.pages import env_path, field, form_fields, page, redirect
from control_plane.dashboard.scope import environment
from control_plane.dashboard.sessions import require_csrf, require_session, session_of
from control_plane.edge.errors import status_for
from control_plane.edge.resources import team_of
from core.errors import ValidationFailed
from tenants.errors import KeyLimitReached
from tenants.keys import SCOPES
from tenants.models import ApiKey, IssuedKey
from tenants.service import MAX_ACTIVE_KEYS
from tenants.team.audit import Actor
from tenants.team.service import TeamService

MAX_KEY_NAME = 200
NO_STORE = {"Cache-Control": "no-store"}


def is_active(key: ApiKey, now: datetime) -> bool:
    """Not revoked and not expired: what counts towards the two-key limit."""
    return key.revoked_at is None and (key.expires_at is None or key.expires_at > now)


def parse_key_form(fields: dict[str, list[str]]) -> tuple[str, list[str]]:
    """Name and scopes of the create form; at least one known scope."""
    name = field(fields, "name")
    if len(name) > MAX_KEY_NAME:
        raise ValidationFailed(f"name must be at most {MAX_KEY_NAME} characters", field="name")
    scopes = [scope for scope in fields.get("scopes", []) if scope in SCOPES]
    if not scopes:
        raise ValidationFailed("choose at least one scope for the key", field="scopes")
    return name, scopes


class KeyPages(Controller):
    """``/dashboard/envs/{env}/keys``: viewers and developers see, owners and admins manage."""

    path = "/dashboard/envs/{env_id:str}/keys"
    guards = [require_session, require_csrf]
    include_in_schema = False

    @get("/")
    async def list_keys(
        self, request: Request[Any, Any, Any], env_id: FromPath[str]
    ) -> Response[Any]:
        """Active and revoked keys of the environment, never their secrets."""
        return await render_keys(request, env_id)

    @post("/")
    async def create_key(
        self,
        request: Request[Any, Any, Any],
        team: NamedDependency[TeamService],
        env_id: FromPath[str],
    ) -> Response[Any]:
        """Issue a key and show its secret on this page, once; the two-key limit explained."""
        fields = await form_fields(request)
        session = session_of(request)
        try:
            access = await team.environment(session.user_id, env_id, "manage_keys")
            name, scopes = parse_key_form(fields)
            issued = await team.create_key(
                access.organisation.id,
                env_id,
                Actor.user(session.user_id, session.email),
                name=name,
                scopes=scopes,
            )
        except (ValidationFailed, KeyLimitReached) as exc:
            limit_hit = isinstance(exc, KeyLimitReached)
            return await render_keys(
                request, env_id, status=status_for(exc), error=exc.message, limit_hit=limit_hit
            )
        return await render_keys(request, env_id, status=201, created=issued)

    @post("/{key_id:str}/revoke")
    async def revoke_key(
        self,
        request: Request[Any, Any, Any],
        team: NamedDependency[TeamService],
        env_id: FromPath[str],
        key_id: FromPath[str],
    ) -> Response[Any]:
        """Revoke a key of this environment (another environment's key is not found)."""
        session = session_of(request)
        access = await team.environment(session.user_id, env_id, "manage_keys")
        actor = Actor.user(session.user_id, session.email)
        await team.revoke_key(access.organisation.id, env_id, key_id, actor)
        return redirect(env_path(env_id, "keys"), notice="key-revoked")


async def render_keys(
    request: Request[Any, Any, Any],
    env_id: str,
    *,
    status: int = 200,
    error: str | None = None,
    created: IssuedKey | None = None,
    limit_hit: bool = False,
) -> Response[Any]:
    """The keys page (never cached: it may carry a secret just made)."""
    access = await environment(request, env_id)
    keys = await team_of(request.app).list_keys(env_id, include_revoked=True)
    now = datetime.now(UTC)
    active = [key for key in keys if is_active(key, now)]
    return page(
        request,
        "keys.html",
        status=status,
        access=access,
        headers=NO_STORE,
        section="keys",
        error=error,
        active=active,
        inactive=[key for key in keys if not is_active(key, now)],
        created=created,
        limit_hit=limit_hit,
        max_active=MAX_ACTIVE_KEYS,
        scopes=SCOPES,
    )
