"""Who is calling: the tenants' door for the HTTP edge's authentication and limits.

API keys are authenticated (and their use recorded), an organisation's limits read, dashboard
users signed in and out and their sessions looked up. Each method runs on its own pooled
connection and transaction, so a middleware, a guard or a handler calls one method and opens
nothing itself. Accounts and teams (sign-up, members, keys, invitations, the audit log) are
:class:`tenants.team.service.TeamService`.
"""

from __future__ import annotations

from datetime import datetime

from core.db import Database
from tenants import rate_limits, service, sessions
from tenants.login_throttle import LoginThrottle
from tenants.models import AuthContext
from tenants.sessions import NewSession, Session
from tenants.tiers import Limits


class Identity:
    """API keys, dashboard sessions and the limits that go with them, on one database."""

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
