"""API key format: ``pq_live_sk_`` (production) or ``pq_test_sk_`` + 32 base62 characters.

Only the SHA-256 of a key is stored, with a display hint; the full key exists once, in the
response that created it.
"""

from __future__ import annotations

import hashlib
import re

from tenants.ids import random_base62

LIVE_PREFIX = "pq_live_sk_"
TEST_PREFIX = "pq_test_sk_"
SECRET_LENGTH = 32
KEY_PATTERN = re.compile(r"^pq_(live|test)_sk_[0-9A-Za-z]{32}$")
SCOPES = ("publish", "consume", "admin")


def prefix_for(environment: str) -> str:
    """Production keys are live keys; development and staging keys are test keys."""
    return LIVE_PREFIX if environment == "production" else TEST_PREFIX


def generate_key(environment: str) -> str:
    """A new key for an environment named ``environment``."""
    return prefix_for(environment) + random_base62(SECRET_LENGTH)


def is_well_formed(key: str) -> bool:
    """Whether ``key`` has the shape of a QueueCore key (no database lookup)."""
    return bool(KEY_PATTERN.match(key))


def key_hash(key: str) -> bytes:
    """The stored digest of a key."""
    return hashlib.sha256(key.encode("ascii")).digest()


def hint(key: str) -> str:
    """What the dashboard shows: ``…`` and the last four characters, never the prefix."""
    return f"…{key[-4:]}"
