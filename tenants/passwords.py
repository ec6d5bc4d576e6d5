"""Password hashing with argon2id."""

from __future__ import annotations

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

_HASHER = PasswordHasher()  # argon2id with the library's current recommended parameters
MIN_PASSWORD_LENGTH = 10


def hash_password(password: str) -> str:
    """An argon2id hash string."""
    return _HASHER.hash(password)


def verify_password(stored_hash: str, password: str) -> bool:
    """Whether ``password`` matches; never raises for a mismatch."""
    try:
        return _HASHER.verify(stored_hash, password)
    except (VerificationError, InvalidHashError):
        return False


DUMMY_HASH = hash_password("queuecore-timing-equaliser")
