"""What the GreptimeDB series task reads from PostgreSQL: every group partition's consumer state,
and the usage of the previous and current hour, with the tenant's names."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from core.db import Database
from observability import queries as q

Rows = list[dict[str, Any]]


class SeriesSnapshot:
    """The series' rows read on one connection of ``db``."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def read(self, now: datetime, limit: int) -> tuple[Rows, Rows]:
        """Consumer rows and usage rows since the start of the previous hour, ``limit`` each."""
        since = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
        async with self._db.connection() as conn:
            consumers = await (await conn.execute(q.CONSUMERS, {"limit": limit})).fetchall()
            params = {"since": since, "limit": limit}
            usage = await (await conn.execute(q.USAGE_HOURLY, params)).fetchall()
        return consumers, usage
