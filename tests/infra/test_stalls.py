"""Stalls fail fast: a frozen S3 or a PostgreSQL call that waits is answered within its
deadline (shorter than a client's timeout), and the stalled publish commits nothing.

The frozen S3 is a real listening socket whose owner never reads (what a SIGSTOPped server
looks like to a client: connections are accepted by the kernel, nothing answers). The stalled
PostgreSQL call is a real lock held by another transaction on the partition a publish needs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from core import settings
from core.db import async_pool, connect
from core.object_store import S3ObjectStore
from core.settings import DatabaseSettings, ObjectStoreSettings, WriterSettings
from data_plane.errors import PublishUnavailable
from data_plane.write.writer import SegmentWriter
from tests.data_plane.test_writer import entries, index_rows, new_topic, next_offsets
from tests.support.services import Services
from tests.support.tenancy import new_organisation

FAST = WriterSettings(linger_ms=0, standard_linger_ms=30, max_segment_bytes=8 << 20)


@pytest.fixture
def frozen_endpoint() -> Iterator[str]:
    """An address that accepts TCP connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_settings_bound_every_call_by_default() -> None:
    database = DatabaseSettings.from_env({"QUEUECORE_DATABASE_URL": "postgresql://x@h/db"})
    assert database.statement_timeout_ms == 5_000
    store = ObjectStoreSettings.from_env(
        {"QUEUECORE_OBJECT_STORE_URL": "s3://bucket", "QUEUECORE_S3_REQUEST_TIMEOUT_MS": "800"}
    )
    assert (store.connect_timeout_ms, store.request_timeout_ms) == (2_000, 800)


def test_a_frozen_s3_fails_a_put_and_a_get_within_their_deadline(
    services: Services, frozen_endpoint: str
) -> None:
    frozen = dataclasses.replace(
        settings.object_store(),
        endpoint_url=frozen_endpoint,
        connect_timeout_ms=300,
        request_timeout_ms=500,
    )
    store = S3ObjectStore.from_settings(frozen)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        asyncio.run(store.put_async("segments/frozen.seg", b"x"))
    assert time.monotonic() - started < 2.0  # one attempt: a timeout is not retried
    started = time.monotonic()
    with pytest.raises(Exception, match=r"(?i)timeout"):
        store.get("segments/frozen.seg")
    assert time.monotonic() - started < 4.0  # boto3: two attempts of 0.5 s at most, plus backoff


def test_a_stalled_commit_fails_fast_and_commits_nothing(services: Services) -> None:
    topic = new_topic(services.database_url, partitions=1)
    locked, release = threading.Event(), threading.Event()

    def hold_the_partition() -> None:
        with connect(services.database_url) as conn:
            conn.execute("SELECT 1 FROM partitions WHERE topic_id = %s FOR UPDATE", (topic.id,))
            locked.set()
            release.wait(30)
            conn.rollback()

    holder = threading.Thread(target=hold_the_partition)
    holder.start()
    locked.wait(10)

    async def publish() -> tuple[BaseException | None, float]:
        bounded = dataclasses.replace(settings.database(), statement_timeout_ms=500)
        pool = async_pool(bounded, "test-stalls")
        await pool.open(wait=True)
        objects = S3ObjectStore.from_settings(settings.object_store())
        writer = SegmentWriter(pool, objects, FAST)
        await writer.start()
        started = time.monotonic()
        try:
            await writer.write(topic, entries(2, 0, "stalled"))
        except PublishUnavailable as exc:
            return exc, time.monotonic() - started
        finally:
            release.set()
            await writer.close()
            await pool.close()
        return None, time.monotonic() - started

    failure, elapsed_s = asyncio.run(publish())
    holder.join(10)
    assert isinstance(failure, PublishUnavailable)
    assert "nothing was written" in failure.message  # a statement timeout is a certain rollback
    assert elapsed_s < 3.0
    assert index_rows(services.database_url, topic.id) == []
    assert next_offsets(services.database_url, topic.id) == {0: 0}


def test_a_cancelled_statement_is_cancelled_in_postgresql_too(services: Services) -> None:
    """A request that gives up (its client left) abandons its statement: the connection is
    closed at once, and PostgreSQL is asked to cancel what it was running, so a statement that
    still waited (here for a lock) never commits afterwards."""
    org = new_organisation(services.database_url).organisation
    locked, release = threading.Event(), threading.Event()

    def hold_the_row() -> None:
        with connect(services.database_url) as conn:
            conn.execute("SELECT 1 FROM organisations WHERE id = %s FOR UPDATE", (org.id,))
            locked.set()
            release.wait(30)
            conn.rollback()

    holder = threading.Thread(target=hold_the_row)
    holder.start()
    locked.wait(10)

    async def give_up() -> None:
        pool = async_pool(settings.database(), "test-cancel")
        await pool.open(wait=True)
        try:
            async with pool.connection() as conn:
                await conn.set_autocommit(True)
                update = conn.execute(
                    "UPDATE organisations SET name = 'changed-after-cancel' WHERE id = %s",
                    (org.id,),
                )
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(update, 0.4)  # the caller gives up
            # The cancel request goes out in the background; the lock is released well before
            # PostgreSQL's own check for a gone client (client_connection_check_interval, 1 s).
            await asyncio.sleep(0.2)
        finally:
            release.set()
            await asyncio.sleep(1.0)  # the lock is gone: an uncancelled UPDATE would run now
            await pool.close()

    asyncio.run(give_up())
    holder.join(10)
    with connect(services.database_url) as conn:
        row = conn.execute("SELECT name FROM organisations WHERE id = %s", (org.id,)).fetchone()
    assert row is not None and row["name"] == org.name
