"""Maintenance that a fault cuts short is retried, not skipped until the next beat.

The orphan GC task runs (eagerly, in this process) against the real SeaweedFS wrapped in a
:class:`FaultyObjectStore` whose first listings fail as an S3 outage would.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import psycopg
import pytest

from core.db import Connector
from data_plane import tasks
from data_plane.faults import FaultyObjectStore
from data_plane.maintenance import cleanup
from data_plane.maintenance.cleanup import list_objects
from data_plane.write.writer import segment_key
from tests.data_plane.stored import exists, object_store
from tests.support.services import Services


def test_an_orphan_gc_run_failed_by_s3_is_retried_and_deletes_the_orphan(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = object_store()
    orphan = segment_key()  # in this hour's prefix: found whatever runs listed before
    real.put(orphan, b"written, never committed")
    time.sleep(2.5)
    faulty = FaultyObjectStore(real)
    faulty.fail_next("list_keys", 2)  # two runs lost to an S3 outage
    monkeypatch.setattr(tasks, "_object_store", lambda: faulty)

    result = tasks.collect_orphans.apply(kwargs={"grace_s": 2})

    assert result.successful(), result.traceback
    assert result.get()["objectsDeleted"] >= 1
    assert faulty.failures["list_keys"] == 2
    assert not exists(real, orphan)


def test_a_maintenance_run_gives_up_after_its_retries_and_says_why(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    faulty = FaultyObjectStore(object_store())
    faulty.fail_always("list_keys")
    monkeypatch.setattr(tasks, "_object_store", lambda: faulty)

    result = tasks.collect_orphans.apply(kwargs={"grace_s": 2})

    assert result.failed()
    assert "injected list_keys failure" in str(result.result)
    assert faulty.failures["list_keys"] == 1 + tasks.RETRIED_ON_OUTAGE["max_retries"]


class RecordingLists:
    """The real object store, remembering the prefix of every listing."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.prefixes: list[str] = []

    def list_objects(self, prefix: str = "") -> list[Any]:
        self.prefixes.append(prefix)
        return list_objects(self.real, prefix)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_orphan_collection_lists_only_the_hours_since_its_last_run(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    recording = RecordingLists(object_store())
    monkeypatch.setattr(tasks, "_object_store", lambda: recording)
    tasks.collect_orphans(grace_s=2)  # the first run of a day may list everything
    orphan = segment_key()
    recording.real.put(orphan, b"written, never committed")
    time.sleep(2.5)
    recording.prefixes.clear()

    report = tasks.collect_orphans(grace_s=2)

    assert report["objectsDeleted"] >= 1
    assert not exists(recording.real, orphan)
    assert recording.prefixes, "nothing listed"
    assert all(re.fullmatch(r"segments/\d{4}/\d\d/\d\d/\d\d/", p) for p in recording.prefixes), (
        recording.prefixes
    )
    assert len(recording.prefixes) <= 2  # this hour (and the previous one just after it turns)


def test_a_background_run_that_waits_for_a_lock_gives_up_instead_of_hanging(
    services: Services,
) -> None:
    """A session holding a lock the orphan GC needs makes the run fail within its lock timeout
    (an outage its task retries), never hold the worker for as long as the lock is kept."""
    with psycopg.connect(services.database_url) as holder:
        holder.execute("LOCK TABLE segment_objects IN ACCESS EXCLUSIVE MODE")
        connector = Connector(services.database_url, lock_timeout_ms=300)

        async def collect() -> None:
            async with connector.connection() as conn:
                await cleanup.collect_orphans(conn, object_store(), grace_s=2)

        started = time.monotonic()
        with pytest.raises(psycopg.errors.LockNotAvailable):
            asyncio.run(collect())
        assert time.monotonic() - started < 30  # the S3 listing and the 0.3 s wait, not the lock
        holder.rollback()
