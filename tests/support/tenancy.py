"""Creating tenants for tests through the real tenancy service."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row

from tenants import service as tenants
from tenants.models import NewOrganisation

T = TypeVar("T")


def run_in_tx(database_url: str, work: Callable[[Any], Awaitable[T]]) -> T:
    """Run ``work(conn)`` in one committed transaction on a fresh async connection."""

    async def _run() -> T:
        async with await psycopg.AsyncConnection.connect(
            database_url, row_factory=dict_row
        ) as conn:
            result = await work(conn)
            await conn.commit()
            return result

    return asyncio.run(_run())


def new_organisation(
    database_url: str, tier: str = "developer", name: str | None = None
) -> NewOrganisation:
    """A fresh organisation with owner, default project, three environments and a key each."""
    suffix = secrets.token_hex(4)
    org_name = name or f"org-{suffix}"
    return run_in_tx(
        database_url,
        lambda conn: tenants.create_organisation(
            conn, org_name, f"owner-{suffix}@example.com", "correct-horse-battery", tier=tier
        ),
    )


def bearer(secret: str) -> dict[str, str]:
    """The Authorization header for a key."""
    return {"Authorization": f"Bearer {secret}"}
