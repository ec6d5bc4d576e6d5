"""One-time link tokens: random, prefixed so logs can mask them, stored only as SHA-256."""

from __future__ import annotations

import re
import secrets

from tenants.sessions import token_hash

TOKEN_BYTES = 32
_SHAPE = re.compile(r"^qc_(inv|rst)_[A-Za-z0-9_-]{43}$")


def new_token(prefix: str) -> str:
    """A fresh token: ``prefix`` + 43 URL-safe characters (256 random bits)."""
    return prefix + secrets.token_urlsafe(TOKEN_BYTES)


def stored_hash(token: str, prefix: str) -> bytes | None:
    """What the database keeps for ``token``; None for anything not shaped like one of ours."""
    if not token.startswith(prefix) or not _SHAPE.match(token):
        return None
    return token_hash(token)
