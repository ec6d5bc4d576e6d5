"""``/v1/keys``: the API keys of the caller's environment (admin scope)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from litestar import Controller, Request, delete, get, post
from litestar.di import NamedDependency
from litestar.params import Body, FromPath, QueryParameter

from control_plane.edge.auth import auth_context
from tenants.schemas import CreatedKeyView, CreateKeyRequest, KeyList, KeyView
from tenants.team.audit import Actor
from tenants.team.service import TeamService


class KeysController(Controller):
    """Issue, list and revoke keys; always within the calling key's environment."""

    path = "/keys"
    tags = ["keys"]
    opt = {"scope": "admin"}

    @get("/", summary="List the environment's API keys (never their secrets)")
    async def list_keys(
        self,
        request: Request[Any, Any, Any],
        team: NamedDependency[TeamService],
        include_revoked: Annotated[bool, QueryParameter(name="includeRevoked")] = False,
    ) -> KeyList:
        """Keys of this environment."""
        ctx = auth_context(request)
        keys = await team.list_keys(ctx.environment_id, include_revoked)
        now = datetime.now(UTC)
        return KeyList(keys=[KeyView.of(key, now) for key in keys])

    @post("/", summary="Create an API key; the secret is in this response only")
    async def create_key(
        self,
        request: Request[Any, Any, Any],
        team: NamedDependency[TeamService],
        data: Annotated[CreateKeyRequest, Body()],
    ) -> CreatedKeyView:
        """At most two active keys per environment (409 ``KEY_LIMIT_REACHED``)."""
        ctx = auth_context(request)
        issued = await team.create_key(
            ctx.organisation_id,
            ctx.environment_id,
            Actor.api_key(ctx.key_id),
            name=data.name,
            scopes=data.scopes,
            expires_at=data.expires_at,
        )
        view = KeyView.of(issued.key, datetime.now(UTC))
        return CreatedKeyView(
            **{f: getattr(view, f) for f in view.__struct_fields__}, key=issued.secret
        )

    @delete("/{key_id:str}", summary="Revoke an API key", status_code=200)
    async def revoke_key(
        self,
        request: Request[Any, Any, Any],
        team: NamedDependency[TeamService],
        key_id: FromPath[str],
    ) -> KeyView:
        """Revoked keys fail on every replica within a few seconds."""
        ctx = auth_context(request)
        key = await team.revoke_key(
            ctx.organisation_id, ctx.environment_id, key_id, Actor.api_key(ctx.key_id)
        )
        return KeyView.of(key, datetime.now(UTC))
