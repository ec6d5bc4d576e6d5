"""What the scheduling tasks ask PostgreSQL before starting a Spark job (one indexed ``EXISTS``,
so an idle installation starts no JVM), and the lag series a finished job wrote."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from core.db import Database
from spark_pipelines import queries as q


class JobInputs:
    """Whether each job has work, on connections of ``db``."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def _found(self, statement: str, params: dict[str, Any]) -> bool:
        async with self._db.connection() as conn:
            row = await (await conn.execute(statement, params)).fetchone()
        return bool(row and row["found"])

    async def has_snapshots(self, since: datetime, until: datetime) -> bool:
        """Lag snapshots in ``[since, until)``: the lag analytics job has work."""
        return await self._found(q.ANY_SNAPSHOTS, {"since": since, "until": until})

    async def has_usage(self, first: date) -> bool:
        """Hourly usage in the month starting ``first``: the usage aggregation has work."""
        since = datetime(first.year, first.month, 1, tzinfo=UTC)
        until = datetime(first.year + first.month // 12, first.month % 12 + 1, 1, tzinfo=UTC)
        return await self._found(q.ANY_HOURLY, {"since": since, "until": until})

    async def has_compaction_candidates(self, small_object_bytes: int, min_age_s: int) -> bool:
        """Small segment objects old enough to merge."""
        params = {"small_object_bytes": small_object_bytes, "min_age_s": min_age_s}
        return await self._found(q.ANY_CANDIDATES, params)

    async def lag_series(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        """The lag series points of a window, with the tenants' names (for GreptimeDB)."""
        async with self._db.connection() as conn:
            return await (await conn.execute(q.LAG_SERIES, params)).fetchall()
