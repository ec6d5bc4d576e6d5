"""Worker-level tasks: a health round trip, and the GreptimeDB consumer and usage series."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from datetime import UTC, datetime
from typing import Any

from celery import shared_task

from core import settings
from core.db import Connector
from observability import series
from observability.series_rows import consumer_rows, usage_rows
from observability.snapshots import SeriesSnapshot


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
    snapshot = SeriesSnapshot(Connector(settings.database().url))
    consumers, usage = asyncio.run(snapshot.read(now, limit))
    rows = consumer_rows(consumers, int(now.timestamp()) // 60 * 60_000)
    rows += usage_rows(usage)
    queued = sum(writer.offer(row) for row in rows)
    return {"consumerRows": len(consumers), "usageRows": len(usage), "queued": queued}
