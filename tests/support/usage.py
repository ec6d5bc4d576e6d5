"""Usage rows for tests: written and read with plain SQL, and the API process's meter flushed."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from litestar.testing import TestClient

from control_plane.edge.resources import resources_of
from core.db import connect

COUNTER_COLUMNS = (
    "messages_in",
    "bytes_in",
    "messages_out",
    "bytes_out",
    "publish_requests",
    "consume_requests",
    "admin_requests",
)


def flush(client: TestClient) -> int:
    """Flush the in-process API's usage meter now (after any flush in progress); rows written."""
    assert client.blocking_portal is not None
    return int(client.blocking_portal.call(resources_of(client.app).usage.flush))


def insert_hourly(url: str, environment_id: str, hour: datetime, **values: int) -> None:
    """Set the given columns of one ``usage_hourly`` row (created if missing)."""
    columns = ", ".join(values)
    placeholders = ", ".join(["%s"] * len(values))
    updates = ", ".join(f"{name} = excluded.{name}" for name in values)
    with connect(url) as conn:
        conn.execute(
            f"INSERT INTO usage_hourly (environment_id, hour, {columns})"
            f" VALUES (%s, %s, {placeholders})"
            f" ON CONFLICT (environment_id, hour) DO UPDATE SET {updates}",
            (environment_id, hour, *values.values()),
        )


def hourly_totals(url: str, environment_id: str) -> dict[str, int]:
    """The environment's counters summed over every hour."""
    sums = ", ".join(f"coalesce(sum({name}), 0)::bigint AS {name}" for name in COUNTER_COLUMNS)
    with connect(url) as conn:
        row = conn.execute(
            f"SELECT {sums} FROM usage_hourly WHERE environment_id = %s", (environment_id,)
        ).fetchone()
    assert row is not None
    return dict(row)


def hourly_row(url: str, environment_id: str, hour: datetime) -> dict[str, Any] | None:
    """One ``usage_hourly`` row."""
    with connect(url) as conn:
        return conn.execute(
            "SELECT * FROM usage_hourly WHERE environment_id = %s AND hour = %s",
            (environment_id, hour),
        ).fetchone()
