"""Resource ids: a type prefix and random base62 characters (``org_…``, ``key_…``)."""

from __future__ import annotations

import os
import string

BASE62 = string.digits + string.ascii_letters


# Byte b < 248 (= 4 · 62) becomes BASE62[b % 62]; bytes 248..255 are dropped, so every character
# is equally likely (a plain b % 62 would favour the first eight).
_KEEP = 4 * len(BASE62)
_TO_CHAR = bytes(ord(BASE62[b % len(BASE62)]) if b < _KEEP else 0 for b in range(256))
_DROP = bytes(range(_KEEP, 256))


def random_base62(length: int) -> str:
    """``length`` characters from the operating system's CSPRNG, uniformly.

    One ``os.urandom`` call and a byte translation per id: lease ids are made on every pull,
    and a ``secrets.choice`` per character cost ~18 µs an id.
    """
    chars = b""
    while len(chars) < length:  # 1/32 of the bytes are dropped; rarely a second round
        chars += os.urandom(length + 8).translate(_TO_CHAR, _DROP)
    return chars[:length].decode()


def new_id(prefix: str, length: int = 16) -> str:
    """A new id such as ``org_3kX9…``."""
    return f"{prefix}_{random_base62(length)}"
