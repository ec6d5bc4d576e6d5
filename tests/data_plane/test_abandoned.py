"""Work whose client has gone is abandoned before it commits.

In the writer: a publish whose caller is cancelled while it still waits for its flush is dropped.
End to end: a client that gives up (its own timeout) on a publish still waiting for its flush,
against a real ``queuecore serve``, leaves nothing stored.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from core import settings
from core.db import async_pool
from core.object_store import S3ObjectStore
from core.settings import WriterSettings
from data_plane.write.writer import SegmentWriter
from infra.embedded import free_port_block
from tests.data_plane.test_writer import entries, index_rows, new_topic
from tests.support.processes import http_status, queuecore, stop, wait_for
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation

LINGER_MS = 2_000


def test_a_cancelled_publish_still_waiting_for_its_flush_is_not_written(
    services: Services,
) -> None:
    topic = new_topic(services.database_url, partitions=1, latency_class="standard")
    slow = WriterSettings(linger_ms=0, standard_linger_ms=LINGER_MS, max_segment_bytes=8 << 20)

    async def work() -> None:
        pool = async_pool(settings.database(), "test-abandoned")
        await pool.open(wait=True)
        writer = SegmentWriter(pool, S3ObjectStore.from_settings(settings.object_store()), slow)
        await writer.start()
        try:
            gone = asyncio.create_task(writer.write(topic, entries(2, 0, "gone")))
            await asyncio.sleep(0.2)
            gone.cancel()  # the request of a client that disconnected
            kept = await writer.write(topic, entries(1, 0, "kept"))
            assert [p.offset for p in kept] == [0]
        finally:
            await writer.close()
            await pool.close()

    asyncio.run(work())
    rows = index_rows(services.database_url, topic.id)
    assert [(r["base_offset"], r["count"]) for r in rows] == [(0, 1)]


@pytest.fixture(scope="module")
def lingering_api(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``queuecore serve`` whose standard-latency publishes wait 2 s for their flush."""
    port, log = free_port_block(), tmp_path_factory.mktemp("api") / "serve.log"
    env = {
        **services.env(),
        "QUEUECORE_HTTP_PORT": str(port),
        "QUEUECORE_WRITER_STANDARD_LINGER_MS": str(LINGER_MS),
    }
    proc = queuecore(["serve", "--workers", "1"], env, log)
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: http_status(f"{base}/readyz") == 200, 60, "api ready", proc, log)
    yield base
    stop(proc)


def test_a_client_that_gives_up_before_the_flush_leaves_nothing_stored(
    services: Services, lingering_api: str, tmp_path: Path
) -> None:
    org = new_organisation(services.database_url, tier="pro")
    headers = bearer(org.keys["production"].secret)
    with httpx.Client(base_url=lingering_api, headers=headers, timeout=10) as client:
        created = client.post(
            "/v1/topics", json={"name": "abandon.me", "partitions": 1, "latencyClass": "standard"}
        )
        assert created.status_code == 201, created.text
        with pytest.raises(httpx.TimeoutException):
            client.post("/v1/topics/abandon.me/messages", json={"data": "gone"}, timeout=0.5)
        time.sleep(LINGER_MS / 1000 + 1.0)  # the flush it would have joined is over
        stored = client.post("/v1/topics/abandon.me/messages", json={"data": "kept"})
        assert stored.status_code == 201, stored.text
        assert stored.json()["offset"] == 0  # the abandoned publish took no offset
        page = client.get("/v1/topics/abandon.me/partitions/0/messages").json()
        assert [m["data"] for m in page["messages"]] == ["kept"]
