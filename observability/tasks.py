"""Worker-level tasks: a health round trip, and the GreptimeDB consumer and usage series."""

from __future__ import annotations

import os
import socket
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from celery import shared_task

from core import settings
from core.db import Conn
from core.worker import run_connected
from observability import queries as q
from observability import series
from observability.series_rows import consumer_rows, usage_rows


@shared_task(name="queuecore.ping")
def ping(token: str) -> dict[str, object]:
    """Echo ``token`` with the worker's identity: proves a broker → worker → backend round trip."""
    return {"token": token, "worker": f"{socket.gethostname()}:{os.getpid()}", "at": time.time()}


@shared_task(name="observability.snapshot_series")
def snapshot_series() -> dict[str, Any]:
    """Send the consumer and hourly usage series to GreptimeDB (nothing when switched off)."""
    writer = series.writer(settings.greptime())
    if writer is None:
        return {"skipped": "QUEUECORE_GREPTIMEDB_GRPC is not set"}
    now = datetime.now(UTC)
    limit = settings.greptime().queue_rows
    consumers, usage = run_connected(lambda conn: _read_snapshot(conn, now, limit))
    rows = consumer_rows(consumers, int(now.timestamp()) // 60 * 60_000)
    rows += usage_rows(usage)
    queued = sum(writer.offer(row) for row in rows)
    return {"consumerRows": len(consumers), "usageRows": len(usage), "queued": queued}


async def _read_snapshot(
    conn: Conn, now: datetime, limit: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every group partition's consumer state, and usage of the previous and current hour."""
    consumers = await (await conn.execute(q.CONSUMERS, {"limit": limit})).fetchall()
    since = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    params = {"since": since, "limit": limit}
    usage = await (await conn.execute(q.USAGE_HOURLY, params)).fetchall()
    return consumers, usage
