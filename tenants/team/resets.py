"""Password resets by emailed link: valid once, for :data:`~tenants.team.models.RESET_TTL_S`,
the token stored hashed. A completed reset ends every session of the user and voids their other
links."""

from __future__ import annotations

import asyncio

from core.db import Conn
from tenants.passwords import hash_password
from tenants.service import check_password
from tenants.team import audit
from tenants.team import queries as q
from tenants.team.audit import Actor
from tenants.team.models import RESET_PREFIX, RESET_TTL_S, NewReset, ResetLinkInvalid
from tenants.team.tokens import new_token, stored_hash


async def request(conn: Conn, email: str) -> NewReset | None:
    """A fresh link for the account with this address (None when there is none); older links
    of the account stop working."""
    email = email.strip()
    if not email or len(email) > 320 or "\0" in email:
        return None
    user = await (await conn.execute(q.USER_BY_EMAIL, {"email": email})).fetchone()
    if user is None:
        return None
    await conn.execute(q.RESETS_VOID_OF_USER, {"user_id": user["id"]})
    token = new_token(RESET_PREFIX)
    params = {
        "token_sha256": stored_hash(token, RESET_PREFIX),
        "user_id": user["id"],
        "ttl_s": RESET_TTL_S,
    }
    row = await (await conn.execute(q.RESET_INSERT, params)).fetchone()
    assert row is not None
    return NewReset(str(user["id"]), str(user["email"]), token, row["expires_at"])


async def email_of(conn: Conn, token: str) -> str:
    """The address whose password a live link resets."""
    digest = stored_hash(token, RESET_PREFIX)
    row = None
    if digest is not None:
        row = await (await conn.execute(q.RESET_BY_TOKEN, {"token_sha256": digest})).fetchone()
    if row is None:
        raise ResetLinkInvalid
    return str(row["email"])


async def complete(conn: Conn, token: str, password: str) -> str:
    """Set the new password (once per link); every session of the user ends. Returns the
    user's id."""
    check_password(password)
    digest = stored_hash(token, RESET_PREFIX)
    row = None
    if digest is not None:
        row = await (await conn.execute(q.RESET_CLAIM, {"token_sha256": digest})).fetchone()
    if row is None:
        raise ResetLinkInvalid
    user_id = str(row["user_id"])
    password_hash = await asyncio.to_thread(hash_password, password)
    await conn.execute(q.USER_SET_PASSWORD, {"user_id": user_id, "password_hash": password_hash})
    await conn.execute(q.RESETS_VOID_OF_USER, {"user_id": user_id})
    await conn.execute(q.SESSIONS_END_OF_USER, {"user_id": user_id})
    user = await (await conn.execute(q.USER_EMAIL, {"user_id": user_id})).fetchone()
    assert user is not None
    await audit.record_for_user(
        conn,
        user_id,
        Actor.user(user_id, str(user["email"])),
        "user.password_reset",
        str(user["email"]),
    )
    return user_id
