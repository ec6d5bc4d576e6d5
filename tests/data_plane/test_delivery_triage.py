"""Latency triage of deliveries against the real PostgreSQL and S3: a slow S3 read makes a slow
pull, and the record says the read is where its time went; a fast pull is not recorded."""

from __future__ import annotations

import asyncio
import io
import json
from dataclasses import replace
from typing import Any

from core import settings
from core.db import async_pool
from core.object_store import S3ObjectStore
from core.settings import DataPlaneSettings
from data_plane.delivery.triage import TABLE, SlowDeliveryTriage
from data_plane.groups import service as groups
from data_plane.service import DataPlane, Scope
from observability.series import SeriesWriter
from tests.data_plane.test_triage import AT_ONCE, Received, new_target, one
from tests.support.services import Services

GET_DELAY_S = 0.4


class SlowGets:
    """The real object store, with every ranged GET held for ``delay_s`` (a slow S3)."""

    def __init__(self, real: Any, delay_s: float) -> None:
        self.real = real
        self.delay_s = delay_s

    async def get_async(self, key: str, start: int, end: int) -> bytes:
        await asyncio.sleep(self.delay_s)
        data: bytes = await self.real.get_async(key, start, end)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_a_slow_s3_read_is_recorded_as_the_cause_of_a_slow_delivery(
    services: Services, json_logs: io.StringIO
) -> None:
    target = new_target(services.database_url)
    received = Received()
    rows = SeriesWriter(received, queue_rows=100, batch_rows=10)
    env = target.environment_id

    async def run() -> tuple[int, int]:
        pool = async_pool(settings.database(), "test-delivery-triage")
        await pool.open(wait=True)
        objects = S3ObjectStore.from_settings(settings.object_store())
        # No block cache: every read is an S3 GET.
        config = replace(
            DataPlaneSettings.from_env(),
            database_url=services.database_url,
            writer=AT_ONCE,
            read_cache_max_bytes=0,
        )
        plane = DataPlane(pool, objects, config)
        await plane.start()
        try:
            plane.delivery_triage = SlowDeliveryTriage(slow_ms=200, max_per_s=10, rows=rows)
            async with pool.connection() as conn:
                member = (await groups.join(conn, env, target.name, "g")).member_id
            caller = Scope(target.organisation_id, env)
            await plane.writer.write(target, one(0, "fast"))
            fast = await plane.pull(caller, target.name, "g", member, 10)  # a real GET: < 200 ms
            await plane.writer.write(target, one(1, "slow"))
            plane.reader.objects = SlowGets(plane.reader.objects, GET_DELAY_S)
            slow = await plane.pull(caller, target.name, "g", member, 10)
            return len(fast.deliveries), len(slow.deliveries)
        finally:
            await plane.close()
            await pool.close()

    assert asyncio.run(run()) == (1, 1)
    rows.close()
    [row] = received.rows  # the fast pull was not recorded
    assert row.table == TABLE
    assert row.tags == {
        "environment": env,
        "topic": target.name,
        "group": "g",
        "member": row.tags["member"],
        "cause": "read",
    }
    assert row.fields["read_ms"] >= GET_DELAY_S * 1000
    assert row.fields["total_ms"] >= row.fields["read_ms"] > row.fields["lease_ms"]
    assert row.fields["messages"] == 1
    [line] = [json.loads(m) for m in json_logs.getvalue().splitlines() if "slow_delivery" in m]
    assert (line["event"], line["cause"], line["group"]) == ("slow_delivery", "read", "g")
