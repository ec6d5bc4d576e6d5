"""Lag snapshots of real groups driven over HTTP, their purge, and the lag series API."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from data_plane.groups import lag
from infra.celery_app import celery_app
from tenants.models import NewOrganisation
from tests.data_plane.test_consume_api import Group
from tests.support.lag import (
    group_ids,
    insert_point,
    minute,
    series_of,
    snapshots_of,
)
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation, run_in_tx


@pytest.fixture
def org(services: Services) -> NewOrganisation:
    return new_organisation(services.database_url, tier="pro")


def take(url: str, at: datetime, topic_id: str) -> int:
    """Snapshot the topic's groups for the minute of ``at``, committed."""
    return run_in_tx(url, lambda conn: lag.take_snapshots(conn, at=at, topic_id=topic_id))


def consumed(group: Group, published: int, acked: int) -> list[str]:
    """Publish, pull everything with one member, ack the first ``acked`` of one partition;
    returns the ack ids not acked yet, that partition's first."""
    group.publish(*range(published))
    messages = group.pull(group.join(), max_messages=published)
    assert len(messages) == published
    first = messages[0]["partition"]
    ordered = sorted(messages, key=lambda m: (m["partition"] != first, m["offset"]))
    assert group.ack(*(m["ackId"] for m in ordered[:acked])).status_code == 200
    return [m["ackId"] for m in ordered[acked:]]


def test_a_snapshot_records_every_partitions_offsets_and_lag_as_the_api_reports_them(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str], services: Services
) -> None:
    url = services.database_url
    group = Group(client, org, unique, partitions=2)
    consumed(group, published=6, acked=2)
    ids = group_ids(url, group.topic)
    at = minute(0, datetime.now(UTC))

    assert take(url, at, ids.topic_id) == 2

    api = client.get(f"{group.base}/offsets", headers=group.headers).json()["partitions"]
    rows = snapshots_of(url, ids.group_id)
    assert [
        (r["partition"], r["committed_offset"], r["high_watermark"], r["lag"]) for r in rows
    ] == [(p["partition"], p["current"], p["latest"], p["lag"]) for p in api]
    assert sum(r["high_watermark"] for r in rows) == 6
    assert sum(r["lag"] for r in rows) == 4
    assert {(r["taken_at"], r["environment_id"], r["topic_id"]) for r in rows} == {
        (at, org.project.environment("production").id, ids.topic_id)
    }


def test_snapshots_are_taken_once_per_minute_however_often_the_task_runs(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str], services: Services
) -> None:
    url = services.database_url
    group = Group(client, org, unique)
    left = consumed(group, published=5, acked=1)
    ids = group_ids(url, group.topic)
    start = minute(0, datetime.now(UTC))

    assert take(url, start + timedelta(seconds=5), ids.topic_id) == 1
    assert group.ack(left[0]).status_code == 200
    assert take(url, start + timedelta(seconds=55), ids.topic_id) == 0
    assert [(r["taken_at"], r["lag"]) for r in snapshots_of(url, ids.group_id)] == [(start, 4)]

    assert take(url, start + timedelta(seconds=65), ids.topic_id) == 1
    assert [(r["taken_at"], r["lag"]) for r in snapshots_of(url, ids.group_id)] == [
        (start, 4),
        (start + timedelta(minutes=1), 3),
    ]


def test_groups_of_a_deleted_topic_are_not_snapshotted(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str], services: Services
) -> None:
    url = services.database_url
    kept, doomed = Group(client, org, unique), Group(client, org, unique)
    kept_ids, doomed_ids = group_ids(url, kept.topic), group_ids(url, doomed.topic)
    deleted = client.delete(f"/v1/topics/{doomed.topic}", headers=doomed.headers)
    assert deleted.status_code == 202, deleted.text
    at = minute(0, datetime.now(UTC))

    assert take(url, at, doomed_ids.topic_id) == 0
    assert take(url, at, kept_ids.topic_id) == 1
    assert snapshots_of(url, doomed_ids.group_id) == []


def test_the_beat_task_snapshots_the_current_minute_on_the_worker(
    celery_worker: Path,
    client: TestClient,
    org: NewOrganisation,
    unique: Callable[[str], str],
    services: Services,
) -> None:
    group = Group(client, org, unique, partitions=3)
    group.publish(*range(7))
    ids = group_ids(services.database_url, group.topic)
    before = datetime.now(UTC).replace(second=0, microsecond=0)

    result = (
        celery_app()
        .send_task("data_plane.snapshot_lag", kwargs={"topic_id": ids.topic_id})
        .get(timeout=60)
    )

    assert result == {"snapshotsRecorded": 3}
    rows = snapshots_of(services.database_url, ids.group_id)
    assert sorted(r["partition"] for r in rows) == [0, 1, 2]
    assert sum(r["lag"] for r in rows) == 7
    assert before <= rows[0]["taken_at"] <= datetime.now(UTC)


def test_purge_deletes_snapshots_and_points_older_than_the_retention_only(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str], services: Services
) -> None:
    url = services.database_url
    group = Group(client, org, unique)
    ids = group_ids(url, group.topic)
    now = datetime.now(UTC)
    old, recent = minute(0, now - timedelta(days=8)), minute(0, now - timedelta(days=6))
    for at in (old, recent):
        assert take(url, at, ids.topic_id) == 1
        insert_point(url, ids, at, lag=0)

    report = run_in_tx(url, lambda conn: lag.purge_snapshots(conn, keep_s=7 * 86_400))

    assert report.snapshots >= 1 and report.series_points >= 1
    assert [r["taken_at"] for r in snapshots_of(url, ids.group_id)] == [recent]
    assert [r["bucket_start"] for r in series_of(url, ids.group_id)] == [recent]
    again = run_in_tx(url, lambda conn: lag.purge_snapshots(conn, keep_s=7 * 86_400))
    assert [r["taken_at"] for r in snapshots_of(url, ids.group_id)] == [recent]
    assert again.as_dict().keys() == {"snapshotsPurged", "seriesPointsPurged"}


def lag_of(client: TestClient, group: Group, headers: dict[str, str], **params: Any) -> Any:
    return client.get(f"{group.base}/lag", params=params, headers=headers)


def test_the_lag_api_returns_the_groups_points_of_the_window_oldest_first(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str], services: Services
) -> None:
    url = services.database_url
    group = Group(client, org, unique)
    ids = group_ids(url, group.topic)
    start = minute(-30, datetime.now(UTC))
    insert_point(url, ids, start + timedelta(minutes=2), 300, (1.5, 0.5, 300.0))
    insert_point(url, ids, start, 100, (None, 2.0, None))
    insert_point(url, ids, start + timedelta(minutes=1), 200, (0.5, 2.0, None))

    window = lag_of(
        client,
        group,
        group.headers,
        since=start.isoformat(),
        until=(start + timedelta(minutes=2)).isoformat(),
    )

    assert window.status_code == 200, window.text
    body = window.json()
    assert (body["topic"], body["group"], body["bucketS"]) == (group.topic, "workers", 60)
    assert body["points"] == [
        {
            "at": start.isoformat().replace("+00:00", "Z"),
            "lag": 100,
            "consumeRate": None,
            "produceRate": 2.0,
            "timeToDrainS": None,
        },
        {
            "at": (start + timedelta(minutes=1)).isoformat().replace("+00:00", "Z"),
            "lag": 200,
            "consumeRate": 0.5,
            "produceRate": 2.0,
            "timeToDrainS": None,
        },
    ]
    last_hour = lag_of(client, group, group.headers).json()["points"]
    assert [p["lag"] for p in last_hour] == [100, 200, 300]
    naive = lag_of(client, group, group.headers, since=start.replace(tzinfo=None).isoformat())
    assert [p["lag"] for p in naive.json()["points"]] == [100, 200, 300], "no zone is UTC"


def test_another_environments_group_is_404_and_a_bad_window_is_422(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str], services: Services
) -> None:
    group = Group(client, org, unique)
    insert_point(
        services.database_url, group_ids(services.database_url, group.topic), minute(-5), 9
    )
    stranger = bearer(new_organisation(services.database_url).keys["production"].secret)
    staging = bearer(org.keys["staging"].secret)
    for headers in (stranger, staging):
        response = lag_of(client, group, headers)
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == "TOPIC_NOT_FOUND"
        assert "points" not in response.text
    missing = client.get(f"/v1/topics/{group.topic}/groups/nobody/lag", headers=group.headers)
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "GROUP_NOT_FOUND"
    now = datetime.now(UTC)
    backwards = lag_of(client, group, group.headers, since=now.isoformat(), until=now.isoformat())
    assert backwards.status_code == 422
    assert backwards.json()["error"]["code"] == "VALIDATION_ERROR"
    too_long = lag_of(client, group, group.headers, since=(now - timedelta(days=8)).isoformat())
    assert too_long.status_code == 422


def test_the_lag_api_needs_the_consume_scope(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique)
    statuses = []
    for scope in ("publish", "consume"):  # one at a time: two active keys per environment
        created = client.post("/v1/keys", json={"scopes": [scope]}, headers=group.headers)
        assert created.status_code == 201, created.text
        response = lag_of(client, group, bearer(created.json()["key"]))
        statuses.append((response.status_code, response.json().get("error", {}).get("code")))
        revoked = client.delete(f"/v1/keys/{created.json()['id']}", headers=group.headers)
        assert revoked.status_code in (200, 204), revoked.text
    assert statuses == [(403, "FORBIDDEN"), (200, None)]
