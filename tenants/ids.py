"""Resource ids: a type prefix and random base62 characters (``org_…``, ``key_…``)."""

from __future__ import annotations

import secrets
import string

BASE62 = string.digits + string.ascii_letters


def random_base62(length: int) -> str:
    """``length`` characters from a CSPRNG."""
    return "".join(secrets.choice(BASE62) for _ in range(length))


def new_id(prefix: str, length: int = 16) -> str:
    """A new id such as ``org_3kX9…``."""
    return f"{prefix}_{random_base62(length)}"
