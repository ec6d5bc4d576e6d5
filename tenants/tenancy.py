"""The tenants' door for the edges: API keys, authentication, limits, sign-up, sign-in and
sessions, and which environments a dashboard user may work in.

Each method runs on its own pooled connection and transaction, so an HTTP handler, a guard or a
middleware calls one method and opens nothing itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from core.db import Database
from tenants import access, rate_limits, service, sessions
from tenants.access import EnvironmentAccess, Workspace
from tenants.login_throttle import LoginThrottle
from tenants.models import ApiKey, AuthContext, IssuedKey, NewOrganisation
from tenants.sessions import NewSession, Session
from tenants.tiers import Limits


class Tenancy:
    """Organisations, their environments' keys and their users' sessions, on one pool."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def authenticate(self, presented: str | None) -> AuthContext:
        """The context of a valid API key; ``INVALID_API_KEY`` for anything else, always alike."""
        async with self._db.connection() as conn:
            return await service.authenticate(conn, presented)

    async def record_key_use(self, used: dict[str, datetime]) -> None:
        """Write the last-used times of keys, collected in memory, in one statement."""
        async with self._db.connection() as conn:
            await service.record_key_use(conn, used)

    async def organisation_limits(self, organisation_id: str) -> Limits:
        """An organisation's effective rate limits and quotas."""
        async with self._db.connection() as conn:
            return await rate_limits.organisation_limits(conn, organisation_id)

    async def list_keys(self, environment_id: str, include_revoked: bool = False) -> list[ApiKey]:
        """An environment's keys, without their secrets."""
        async with self._db.connection() as conn:
            return await service.list_keys(conn, environment_id, include_revoked)

    async def create_key(
        self,
        environment_id: str,
        *,
        name: str = "",
        scopes: Iterable[str] | None = None,
        expires_at: datetime | None = None,
    ) -> IssuedKey:
        """A new key (its secret in the result only); at most two active per environment."""
        async with self._db.connection() as conn:
            return await service.create_key(
                conn, environment_id, name=name, scopes=scopes, expires_at=expires_at
            )

    async def revoke_key(self, environment_id: str, key_id: str) -> ApiKey:
        """Revoke a key of this environment; another environment's key is not found."""
        async with self._db.connection() as conn:
            return await service.revoke_key(conn, environment_id, key_id)

    async def sign_up(self, organisation_name: str, email: str, password: str) -> NewOrganisation:
        """A new organisation owned by a new user, with its default project and environments."""
        async with self._db.connection() as conn:
            return await service.sign_up(conn, organisation_name, email, password)

    async def login(
        self, email: str, password: str, throttle: LoginThrottle, client_address: str | None
    ) -> NewSession:
        """A session for valid credentials, within the throttle's allowance of failures."""
        async with self._db.connection() as conn:
            return await sessions.login(conn, email, password, throttle, client_address)

    async def session(self, token: str | None) -> Session:
        """The live session a cookie names, or ``UNAUTHORIZED``."""
        async with self._db.connection() as conn:
            return await sessions.get_session(conn, token)

    async def logout(self, token: str) -> None:
        """End a session: its cookie stops working everywhere at once."""
        async with self._db.connection() as conn:
            await sessions.logout(conn, token)

    async def environment_access(self, user_id: str, environment_id: str) -> EnvironmentAccess:
        """The environment and the user's role there, if it is one of their organisations'."""
        async with self._db.connection() as conn:
            return await access.environment_access(conn, user_id, environment_id)

    async def workspaces(self, user_id: str) -> list[Workspace]:
        """Every organisation of the user with its projects and environments."""
        async with self._db.connection() as conn:
            return await access.workspaces(conn, user_id)
