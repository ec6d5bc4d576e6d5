"""Dashboard login sessions: server-side, looked up by the SHA-256 of a random cookie token.

The token (32 random bytes, URL-safe) exists only in the user's cookie; the database keeps its
hash, so a leaked ``user_sessions`` table cannot be replayed. Each session has its own CSRF token,
which unsafe requests must echo in a header. Sign-in attempts go through a
:class:`~tenants.login_throttle.LoginThrottle`, so passwords cannot be guessed without limit.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.db import Conn
from core.errors import ClientError
from tenants import queries as q
from tenants.errors import InvalidCredentials
from tenants.login_throttle import LoginThrottle
from tenants.passwords import DUMMY_HASH, verify_password

SESSION_TTL_S = 12 * 3600
TOKEN_BYTES = 32
# Longer inputs are refused before hashing so nobody can make argon2 chew on megabytes.
MAX_PASSWORD_LENGTH = 1024


class SessionRequired(ClientError):
    """No cookie, or one naming a session that is unknown, expired or logged out."""

    code = "UNAUTHORIZED"

    def __init__(self) -> None:
        super().__init__("Sign in first: the session is missing, expired or was logged out.")


class CsrfFailed(ClientError):
    """An unsafe request without the session's CSRF token (``X-CSRF-Token`` or a form field)."""

    code = "CSRF_FAILED"

    def __init__(self) -> None:
        super().__init__(
            "The X-CSRF-Token header (or a form's csrf_token field) is missing or does not "
            "match this session."
        )


@dataclass(frozen=True, slots=True)
class Membership:
    """A user's role in one organisation."""

    organisation_id: str
    organisation_name: str
    role: str


@dataclass(frozen=True, slots=True)
class Session:
    """A signed-in user as a request sees them."""

    user_id: str
    email: str
    csrf_token: str
    expires_at: datetime
    memberships: tuple[Membership, ...] = ()

    def csrf_matches(self, presented: str | None) -> bool:
        """Constant-time comparison with the session's CSRF token."""
        return bool(presented) and hmac.compare_digest(
            self.csrf_token.encode(), (presented or "").encode()
        )


@dataclass(frozen=True, slots=True)
class NewSession:
    """A session just opened, with the token that goes into the cookie (and nowhere else)."""

    token: str
    session: Session


def token_hash(token: str) -> bytes:
    """What the database stores for a session token."""
    return hashlib.sha256(token.encode("utf-8")).digest()


async def login(
    conn: Conn,
    email: str,
    password: str,
    throttle: LoginThrottle,
    client_address: str | None,
    ttl_s: int = SESSION_TTL_S,
) -> NewSession:
    """Open a session for valid credentials; :class:`InvalidCredentials` for any mismatch.

    While the account or the client address has had too many recent failures this raises
    :class:`~tenants.login_throttle.TooManyLoginAttempts` without looking at the password.
    """
    user = await _user_by_email(conn, email.strip())
    # An existing account is counted under its stored email, so no spelling that PostgreSQL's
    # lower() matches to it (but Python's lower() does not) gets a fresh allowance of guesses.
    async with throttle.attempt(str(user["email"]) if user else email, client_address):
        return await _open_session(conn, user, password, ttl_s)


async def _open_session(
    conn: Conn, user: dict[str, Any] | None, password: str, ttl_s: int
) -> NewSession:
    if len(password) > MAX_PASSWORD_LENGTH:
        raise InvalidCredentials
    # An unknown email still pays for one argon2 verify, so response time reveals nothing.
    stored = str(user["password_hash"]) if user else DUMMY_HASH
    matches = await asyncio.to_thread(verify_password, stored, password)
    if user is None or not matches:
        raise InvalidCredentials
    return await start_session(conn, str(user["id"]), ttl_s)


async def start_session(conn: Conn, user_id: str, ttl_s: int = SESSION_TTL_S) -> NewSession:
    """Open a session for a user whose identity is already established (just signed in or up)."""
    await conn.execute(q.DELETE_EXPIRED_SESSIONS_OF_USER, {"user_id": user_id})
    token, csrf = secrets.token_urlsafe(TOKEN_BYTES), secrets.token_urlsafe(TOKEN_BYTES)
    params = {"token_sha256": token_hash(token), "user_id": user_id, "csrf_token": csrf}
    await conn.execute(q.INSERT_SESSION, {**params, "ttl_s": ttl_s})
    return NewSession(token, await get_session(conn, token))


async def _user_by_email(conn: Conn, email: str) -> dict[str, Any] | None:
    if not email or len(email) > 320 or "\x00" in email:
        return None  # no such address can be stored
    return await (await conn.execute(q.SELECT_USER_BY_EMAIL, {"email": email})).fetchone()


async def get_session(conn: Conn, token: str | None) -> Session:
    """The live session named by a cookie token, or :class:`SessionRequired`."""
    if not token or len(token) > 256:
        raise SessionRequired
    row = await (
        await conn.execute(q.SELECT_SESSION, {"token_sha256": token_hash(token)})
    ).fetchone()
    if row is None:
        raise SessionRequired
    return Session(
        user_id=row["user_id"],
        email=row["email"],
        csrf_token=row["csrf_token"],
        expires_at=row["expires_at"],
        memberships=tuple(await list_memberships(conn, row["user_id"])),
    )


async def logout(conn: Conn, token: str) -> None:
    """End a session server-side: its cookie stops working everywhere at once."""
    await conn.execute(q.DELETE_SESSION, {"token_sha256": token_hash(token)})


async def list_memberships(conn: Conn, user_id: str) -> list[Membership]:
    """The organisations a user belongs to, with their role in each."""
    rows = await (await conn.execute(q.LIST_MEMBERSHIPS_OF_USER, {"user_id": user_id})).fetchall()
    return [Membership(r["organisation_id"], r["organisation_name"], r["role"]) for r in rows]
