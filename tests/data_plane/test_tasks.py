"""Cleanup tasks on a real Celery worker: topic deletion, orphan GC, retention; all idempotent."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from litestar.testing import TestClient

from core.db import connect
from data_plane import tasks
from data_plane.write.writer import segment_key
from infra.celery_app import celery_app
from tests.data_plane.stored import (
    commit_segment,
    count_rows,
    exists,
    messages,
    object_store,
    seed_topic,
)
from tests.support.processes import wait_for
from tests.support.services import Services
from tests.support.tenancy import bearer

HOUR_MS = 3_600_000


def on_worker(name: str, **kwargs: Any) -> dict[str, int]:
    """Run a task on the worker process and wait for its result."""
    result: dict[str, int] = celery_app().send_task(name, kwargs=kwargs).get(timeout=60)
    return result


def mark_deleting(database_url: str, topic_id: str) -> None:
    with connect(database_url) as conn:
        conn.execute("UPDATE topics SET status = 'deleting' WHERE id = %s", (topic_id,))


def test_deleting_a_topic_removes_its_rows_and_the_objects_only_it_used(
    celery_worker: Path, client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    url, store = services.database_url, object_store()
    doomed = seed_topic(url, unique("doomed"))
    kept = seed_topic(url, unique("kept"), partitions=1)
    own = commit_segment(url, store, {(doomed.id, 0): messages(3), (doomed.id, 1): messages(2)})
    shared = commit_segment(url, store, {(doomed.id, 0): messages(2), (kept.id, 0): messages(4)})
    with connect(url) as conn:
        conn.execute(
            "INSERT INTO idempotency_keys VALUES (%s, 'retry-1', 0, 0, now(), now() + interval '1 day')",
            (doomed.id,),
        )
    mark_deleting(url, doomed.id)

    report = on_worker("data_plane.delete_topic_data", topic_id=doomed.id)

    assert report["topicsDeleted"] == 1
    assert report["indexRowsDeleted"] == 3
    assert report["objectsDeleted"] == 1
    for table, column in [
        ("topics", "id"),
        ("partitions", "topic_id"),
        ("segment_blocks", "topic_id"),
        ("idempotency_keys", "topic_id"),
    ]:
        assert count_rows(url, table, column, doomed.id) == 0, table
    assert not exists(store, own)
    assert count_rows(url, "segment_objects", "object_key", own) == 0
    assert exists(store, shared)
    page = client.get(
        f"/v1/topics/{kept.name}/partitions/0/messages", headers=bearer(kept.secret)
    ).json()
    assert [m["offset"] for m in page["messages"]] == [0, 1, 2, 3]

    again = tasks.delete_topic_data(topic_id=doomed.id)  # in this process, same code
    assert (again["topicsDeleted"], again["objectsDeleted"]) == (0, 0)
    assert exists(store, shared)
    assert count_rows(url, "segment_blocks", "topic_id", kept.id) == 1


def test_the_periodic_sweep_deletes_every_topic_marked_deleting(
    services: Services, unique: Callable[[str], str]
) -> None:
    url, store = services.database_url, object_store()
    first, second = seed_topic(url, unique("sweep")), seed_topic(url, unique("sweep"))
    key = commit_segment(url, store, {(first.id, 0): messages(1), (second.id, 1): messages(1)})
    mark_deleting(url, first.id)
    mark_deleting(url, second.id)
    report = tasks.delete_topic_data()
    assert report["topicsDeleted"] >= 2
    assert count_rows(url, "topics", "id", first.id) == 0
    assert count_rows(url, "topics", "id", second.id) == 0
    assert not exists(store, key)
    assert tasks.delete_topic_data()["topicsDeleted"] == 0


def test_orphans_past_the_grace_period_are_deleted_young_and_committed_ones_kept(
    celery_worker: Path, client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    url, store, grace_s = services.database_url, object_store(), 4
    topic = seed_topic(url, unique("gc"), partitions=1)
    committed = commit_segment(url, store, {(topic.id, 0): messages(2)})
    emptied = commit_segment(url, store, {(topic.id, 0): messages(1)})
    with connect(url) as conn:  # blocks dropped, object delete never happened (a crash)
        conn.execute("DELETE FROM segment_blocks WHERE object_key = %s", (emptied,))
    old_orphan = segment_key()  # keys as the writer names them (the GC lists by their hour)
    store.put(old_orphan, b"written, never committed")
    time.sleep(grace_s + 1.5)
    young_orphan = segment_key()
    store.put(young_orphan, b"a flush still committing")

    report = on_worker("data_plane.collect_orphans", grace_s=grace_s)

    assert report["objectsDeleted"] >= 2
    assert not exists(store, old_orphan)
    assert not exists(store, emptied)
    assert count_rows(url, "segment_objects", "object_key", emptied) == 0
    assert exists(store, young_orphan)
    assert exists(store, committed)
    page = client.get(
        f"/v1/topics/{topic.name}/partitions/0/messages", headers=bearer(topic.secret)
    ).json()
    assert [m["offset"] for m in page["messages"]] == [0, 1]

    tasks.collect_orphans(grace_s=grace_s)  # again, in this process
    assert exists(store, young_orphan)
    assert exists(store, committed)
    assert not exists(store, old_orphan)
    store.delete([young_orphan])


def test_retention_drops_expired_blocks_from_the_start_and_moves_the_earliest_offset(
    celery_worker: Path, client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    url, store = services.database_url, object_store()
    topic = seed_topic(url, unique("retained"), partitions=1, retention_s=3600)
    neighbour = seed_topic(url, unique("neighbour"), partitions=1)
    now_ms = int(time.time() * 1000)
    oldest = commit_segment(url, store, {(topic.id, 0): messages(2, "old", now_ms - 3 * HOUR_MS)})
    shared = commit_segment(
        url,
        store,
        {
            (topic.id, 0): messages(3, "old", now_ms - 2 * HOUR_MS),
            (neighbour.id, 0): messages(1, "n", now_ms - 2 * HOUR_MS),
        },
    )
    commit_segment(url, store, {(topic.id, 0): messages(4, "fresh", now_ms)})

    report = on_worker("data_plane.apply_retention")

    assert report["partitionsTrimmed"] >= 1
    with connect(url) as conn:
        bounds = conn.execute(
            "SELECT start_offset, next_offset FROM partitions WHERE topic_id = %s", (topic.id,)
        ).fetchone()
    assert bounds == {"start_offset": 5, "next_offset": 9}
    assert not exists(store, oldest)
    assert exists(store, shared)  # the neighbour's 7-day retention still needs it
    path = f"/v1/topics/{topic.name}/partitions/0/messages"
    headers = bearer(topic.secret)
    assert client.get(path, params={"offset": 0}, headers=headers).status_code == 416
    page = client.get(path, headers=headers).json()
    assert page["earliestOffset"] == 5
    assert [m["data"]["tag"] for m in page["messages"]] == ["fresh"] * 4

    tasks.apply_retention()  # again, in this process
    assert count_rows(url, "segment_blocks", "topic_id", topic.id) == 1
    assert client.get(path, headers=headers).json()["earliestOffset"] == 5


def test_the_cleanup_tasks_are_registered_and_scheduled(services: Services) -> None:
    app = celery_app()
    app.loader.import_default_modules()
    names = {
        "data_plane.delete_topic_data",
        "data_plane.collect_orphans",
        "data_plane.apply_retention",
        "data_plane.purge_settled_acks",
    }
    assert names <= set(app.tasks)
    assert names == {entry["task"] for entry in app.conf.beat_schedule.values()} & names


def test_silent_members_are_evicted_every_few_seconds(services: Services) -> None:
    app = celery_app()
    app.loader.import_default_modules()
    assert "data_plane.sweep_groups" in app.tasks
    (entry,) = [
        entry
        for entry in app.conf.beat_schedule.values()
        if entry["task"] == "data_plane.sweep_groups"
    ]
    # Well inside the default 30 s session timeout, so a dead member's partitions move soon.
    assert entry["schedule"] <= 10


def test_deleting_a_topic_queues_its_cleanup_at_once(
    client: TestClient, services: Services, celery_worker: Path, unique: Callable[[str], str]
) -> None:
    from tests.support.tenancy import bearer, new_organisation

    org = new_organisation(services.database_url, tier="pro")
    headers = bearer(org.keys["production"].secret)
    name = f"gone.{unique('t')}"
    topic_id = client.post("/v1/topics", json={"name": name}, headers=headers).json()["id"]
    assert (
        client.post(f"/v1/topics/{name}/messages", json={"data": 1}, headers=headers).status_code
        == 201
    )
    assert client.delete(f"/v1/topics/{name}", headers=headers).status_code == 202

    def topic_row_gone() -> bool:
        with psycopg.connect(services.database_url) as conn:
            return (
                conn.execute("SELECT 1 FROM topics WHERE id = %s", (topic_id,)).fetchone() is None
            )

    wait_for(topic_row_gone, 30, "topic data removed by the worker")
