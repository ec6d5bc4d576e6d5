"""Secrets that QueueCore must read back (to sign with them), sealed at rest.

A push signing secret is an HMAC key: the pusher needs it in clear, so it cannot be hashed as API
keys are. With ``QUEUECORE_SECRETS_KEY`` set it is stored as ``v1.`` and the base64 of a random
nonce and its AES-256-GCM ciphertext, bound to what it belongs to (the associated data: a group's
id), so a sealed value copied onto another row does not open. Without the setting it is stored as
``plain.`` and the secret, as alert secrets are (docs/decisions.md §46).
"""

from __future__ import annotations

import base64
import hashlib
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

SEALED = "v1."
PLAIN = "plain."
_NONCE_BYTES = 12
_CONTEXT = b"queuecore secrets v1\x00"


class SealError(Exception):
    """A stored secret cannot be opened: no key, another key, or a value of another row."""


class Sealer:
    """Seals and opens secrets with the deployment's key (or stores them plain without one)."""

    def __init__(self, key: str | None) -> None:
        self._aead = (
            None if key is None else AESGCM(hashlib.sha256(_CONTEXT + key.encode()).digest())
        )

    @property
    def sealing(self) -> bool:
        """Whether new secrets are encrypted (a key is set)."""
        return self._aead is not None

    def seal(self, secret: str, owner: str) -> str:
        """The stored form of ``secret``, bound to ``owner``."""
        if self._aead is None:
            return PLAIN + secret
        nonce = os.urandom(_NONCE_BYTES)
        box = self._aead.encrypt(nonce, secret.encode(), owner.encode())
        return SEALED + base64.urlsafe_b64encode(nonce + box).decode("ascii")

    def open(self, stored: str, owner: str) -> str:
        """The secret a :meth:`seal` of ``owner`` stored."""
        if stored.startswith(PLAIN):
            return stored[len(PLAIN) :]
        if not stored.startswith(SEALED):
            raise SealError("not a stored secret")
        if self._aead is None:
            raise SealError("the secret is sealed and QUEUECORE_SECRETS_KEY is not set")
        raw = base64.urlsafe_b64decode(stored[len(SEALED) :])
        try:
            plain = self._aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], owner.encode())
        except InvalidTag:
            raise SealError("the secret was sealed with another QUEUECORE_SECRETS_KEY") from None
        return plain.decode()
