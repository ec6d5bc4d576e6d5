"""The organisation's audit log: who did what, recorded in the transaction that did it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from core.db import Conn
from tenants.team import queries as q

MAX_PAGE = 100


@dataclass(frozen=True, slots=True)
class Actor:
    """Who made a change, as the log shows them: a user (by email), an API key, the operator."""

    label: str
    user_id: str | None = None

    @classmethod
    def user(cls, user_id: str, email: str) -> Actor:
        """A signed-in dashboard user."""
        return cls(email, user_id)

    @classmethod
    def api_key(cls, key_id: str) -> Actor:
        """A call to the REST API with a key."""
        return cls(f"API key {key_id}")


OPERATOR = Actor("operator (queuecore tenants)")


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One entry of the log."""

    id: int
    at: datetime
    actor: str
    action: str
    target: str
    details: dict[str, Any]


async def record(
    conn: Conn, organisation_id: str, actor: Actor, action: str, target: str = "", **details: Any
) -> None:
    """Add an event to the organisation's log, inside the caller's transaction."""
    await conn.execute(
        q.AUDIT_INSERT,
        {
            "organisation_id": organisation_id,
            "actor_user_id": actor.user_id,
            "actor": actor.label,
            "action": action,
            "target": target,
            "details": Jsonb(details),
        },
    )


async def record_for_user(
    conn: Conn, user_id: str, actor: Actor, action: str, target: str = "", **details: Any
) -> None:
    """Add an event to the log of every organisation the user belongs to."""
    await conn.execute(
        q.AUDIT_INSERT_FOR_USER,
        {
            "user_id": user_id,
            "actor_user_id": actor.user_id,
            "actor": actor.label,
            "action": action,
            "target": target,
            "details": Jsonb(details),
        },
    )


async def page(
    conn: Conn, organisation_id: str, limit: int = 50, before_id: int | None = None
) -> list[AuditEvent]:
    """Newest first, at most ``limit`` (≤ :data:`MAX_PAGE`), older than ``before_id`` if given."""
    rows = await (
        await conn.execute(
            q.AUDIT_PAGE,
            {
                "organisation_id": organisation_id,
                "before_id": before_id,
                "limit": max(1, min(limit, MAX_PAGE)),
            },
        )
    ).fetchall()
    return [AuditEvent(**row) for row in rows]
