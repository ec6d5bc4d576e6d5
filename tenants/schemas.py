"""Wire shapes of the tenancy API (camelCase JSON)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

import msgspec

from core.wire_types import Text
from tenants.models import ApiKey

Scope = Literal["publish", "consume", "admin"]


class CreateKeyRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``POST /v1/keys``."""

    name: Annotated[Text, msgspec.Meta(max_length=100)] = ""
    scopes: Annotated[list[Scope], msgspec.Meta(min_length=1, max_length=3)] | None = None
    expires_at: Annotated[datetime, msgspec.Meta(tz=True)] | None = None


class KeyView(msgspec.Struct, rename="camel"):
    """A key as listed: the hint, never the secret."""

    id: str
    name: str
    hint: str
    environment_id: str
    scopes: list[str]
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None
    status: Literal["active", "revoked", "expired"]

    @classmethod
    def of(cls, key: ApiKey, now: datetime) -> KeyView:
        """Render a key record."""
        status: Literal["active", "revoked", "expired"] = "active"
        if key.revoked_at is not None:
            status = "revoked"
        elif key.expires_at is not None and key.expires_at <= now:
            status = "expired"
        return cls(
            id=key.id,
            name=key.name,
            hint=key.hint,
            environment_id=key.environment_id,
            scopes=list(key.scopes),
            created_at=key.created_at,
            expires_at=key.expires_at,
            revoked_at=key.revoked_at,
            last_used_at=key.last_used_at,
            status=status,
        )


class CreatedKeyView(KeyView, rename="camel"):
    """A key just created, with its secret: shown this once."""

    key: str = ""


class KeyList(msgspec.Struct, rename="camel"):
    """``GET /v1/keys``."""

    keys: list[KeyView]
