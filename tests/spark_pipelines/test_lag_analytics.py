"""The lag analytics job on a real local SparkSession, over snapshots with known values."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from litestar.testing import TestClient

from infra.celery_app import celery_app
from tenants.models import NewOrganisation
from tests.data_plane.test_consume_api import Group
from tests.support.lag import (
    GroupIds,
    group_ids,
    insert_snapshots,
    minute,
    series_of,
    synthetic_group,
)
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation

Point = tuple[int, int, float | None, float | None, float | None]


@pytest.fixture(scope="module")
def job(spark: Any) -> ModuleType:
    """The job module (imported once the session fixture has found PySpark and Java)."""
    from spark_pipelines import lag_analytics

    return lag_analytics


@pytest.fixture
def run(job: ModuleType, spark: Any, services: Services) -> Callable[..., Any]:
    """Run the job over ``[since, until)`` on the session's database."""
    return lambda since, until: job.run(spark, services.database_url, since, until)


def points(url: str, ids: GroupIds, t0: datetime) -> list[Point]:
    """``(minute after t0, lag, consume rate, produce rate, time to drain)`` per bucket."""
    return [
        (
            int((row["bucket_start"] - t0).total_seconds()) // 60,
            row["lag"],
            _round(row["consume_rate"]),
            _round(row["produce_rate"]),
            _round(row["time_to_drain_s"]),
        )
        for row in series_of(url, ids.group_id)
    ]


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def at(t0: datetime, minutes: int) -> datetime:
    return t0 + timedelta(minutes=minutes)


def test_rates_and_time_to_drain_from_known_snapshots(
    run: Callable[..., Any], services: Services
) -> None:
    url, ids, t0 = services.database_url, synthetic_group(), minute(-10)
    # (partition, minute, committed, high watermark): partition 0 consumes 10/s and receives
    # 5/s; partition 1 consumes 5/s then 2/s and receives 1/s.
    p0 = [(0, 0, 1200), (1, 600, 1500), (2, 1200, 1800), (3, 1800, 2100)]
    p1 = [(0, 0, 600), (1, 300, 660), (2, 600, 720), (3, 720, 780)]
    insert_snapshots(
        url, ids, [(p, at(t0, m), c, hw) for p, rows in ((0, p0), (1, p1)) for m, c, hw in rows]
    )

    report = run(t0, at(t0, 4))

    assert report.points >= 4
    assert points(url, ids, t0) == [
        (0, 1800, None, None, None),  # no previous snapshot: no step, no rate
        (1, 1260, 15.0, 6.0, 140.0),  # 1260 / (15 - 6)
        (2, 720, 15.0, 6.0, 80.0),
        (3, 360, 12.0, 6.0, 60.0),
    ]
    row = series_of(url, ids.group_id)[-1]
    assert (row["environment_id"], row["topic_id"], row["partitions"]) == (
        ids.environment_id,
        ids.topic_id,
        2,
    )


def test_time_to_drain_is_null_unless_draining_and_zero_without_lag(
    run: Callable[..., Any], services: Services
) -> None:
    url, t0 = services.database_url, minute(-20)
    keeping_pace, falling_behind, idle = synthetic_group(), synthetic_group(), synthetic_group()
    insert_snapshots(url, keeping_pace, [(0, at(t0, 0), 100, 150), (0, at(t0, 1), 160, 210)])
    insert_snapshots(url, falling_behind, [(0, at(t0, 0), 0, 100), (0, at(t0, 1), 60, 220)])
    insert_snapshots(url, idle, [(0, at(t0, 0), 5, 5), (0, at(t0, 1), 5, 5)])

    run(t0, at(t0, 2))

    assert points(url, keeping_pace, t0)[1] == (1, 50, 1.0, 1.0, None)
    assert points(url, falling_behind, t0)[1] == (1, 160, 1.0, 2.0, None)
    assert points(url, idle, t0) == [(0, 0, None, None, 0.0), (1, 0, 0.0, 0.0, 0.0)]


def test_a_seek_backwards_gives_no_consume_rate_never_a_negative_one(
    run: Callable[..., Any], services: Services
) -> None:
    url, ids, t0 = services.database_url, synthetic_group(), minute(-30)
    # Minute 1: the group seeks back from 500 to 100 while 60 messages arrive.
    rows = [(0, 500, 1000), (1, 100, 1060), (2, 160, 1120), (3, 280, 1180)]
    insert_snapshots(url, ids, [(0, at(t0, m), c, hw) for m, c, hw in rows])

    run(t0, at(t0, 4))

    assert points(url, ids, t0) == [
        (0, 500, None, None, None),
        (1, 960, None, 1.0, None),  # the produce rate of the step still counts
        (2, 960, 1.0, 1.0, None),
        (3, 900, 2.0, 1.0, 900.0),
    ]


def test_a_partition_added_counts_in_the_lag_at_once_and_in_the_rates_from_its_second_snapshot(
    run: Callable[..., Any], services: Services
) -> None:
    url, ids, t0 = services.database_url, synthetic_group(), minute(-40)
    p0 = [(0, 0, 100), (1, 60, 160), (2, 120, 220)]
    p1 = [(1, 0, 30), (2, 120, 150)]  # added to the topic between minutes 0 and 1
    insert_snapshots(
        url, ids, [(p, at(t0, m), c, hw) for p, rows in ((0, p0), (1, p1)) for m, c, hw in rows]
    )

    run(t0, at(t0, 3))

    assert points(url, ids, t0) == [
        (0, 100, None, None, None),
        (1, 130, 1.0, 1.0, None),
        (2, 130, 3.0, 3.0, None),
    ]
    assert [row["partitions"] for row in series_of(url, ids.group_id)] == [1, 2, 2]


def test_missing_snapshots_leave_gaps_and_the_next_step_averages_over_them(
    run: Callable[..., Any], job: ModuleType, services: Services
) -> None:
    url, ids, t0 = services.database_url, synthetic_group(), minute(-80)
    late = job.MAX_STEP_S // 60 + 5  # a step longer than the job trusts
    rows = [(0, 0, 200), (1, 60, 260), (4, 420, 440), (late, 500, 560)]
    insert_snapshots(url, ids, [(0, at(t0, m), c, hw) for m, c, hw in rows])

    run(t0, at(t0, late + 1))

    assert points(url, ids, t0) == [
        (0, 200, None, None, None),
        (1, 200, 1.0, 1.0, None),
        (4, 20, 2.0, 1.0, 20.0),  # 360 consumed and 180 produced in 180 s
        (late, 60, None, None, None),
    ]


def test_the_window_reads_back_for_its_first_step_but_writes_only_its_whole_buckets(
    run: Callable[..., Any], services: Services
) -> None:
    url, ids, t0 = services.database_url, synthetic_group(), minute(-100)
    rows = [(0, 0, 200), (1, 120, 260), (2, 240, 320), (3, 360, 380)]
    insert_snapshots(url, ids, [(0, at(t0, m), c, hw) for m, c, hw in rows])

    report = run(at(t0, 1) - timedelta(seconds=30), at(t0, 3) + timedelta(seconds=30))

    # Bucket 0 is before the window (its snapshot only gives bucket 1 its step); bucket 3 ends
    # after it.
    assert points(url, ids, t0) == [(1, 140, 2.0, 1.0, 140.0), (2, 80, 2.0, 1.0, 80.0)]
    assert (report.since, report.until) == (at(t0, 1), at(t0, 3))


def test_a_rerun_over_the_same_window_replaces_its_points_and_adds_none(
    run: Callable[..., Any], services: Services
) -> None:
    url, ids, t0 = services.database_url, synthetic_group(), minute(-120)
    insert_snapshots(url, ids, [(0, at(t0, m), 60 * m, 100 + 60 * m) for m in range(4)])
    run(t0, at(t0, 4))
    first = series_of(url, ids.group_id)
    run(t0, at(t0, 4))
    assert len(series_of(url, ids.group_id)) == len(first) == 4
    assert points(url, ids, t0)[3] == (3, 100, 1.0, 1.0, None)

    with_fix = [(0, at(t0, 3), 60 * 3 + 100, 100 + 60 * 3)]  # the last snapshot, corrected
    from core.db import connect

    with connect(url) as conn:
        conn.execute(
            "DELETE FROM lag_snapshots WHERE group_id = %s AND taken_at = %s",
            (ids.group_id, at(t0, 3)),
        )
    insert_snapshots(url, ids, with_fix)
    run(t0, at(t0, 4))

    assert len(series_of(url, ids.group_id)) == 4
    assert points(url, ids, t0)[3] == (3, 0, 2.666667, 1.0, 0.0)
    assert series_of(url, ids.group_id)[3]["computed_at"] > first[3]["computed_at"]


def test_the_api_serves_the_series_the_job_computed_for_a_real_group(
    run: Callable[..., Any], client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    org: NewOrganisation = new_organisation(services.database_url, tier="pro")
    group = Group(client, org, unique, partitions=2)
    ids = group_ids(services.database_url, group.topic)
    t0 = minute(-50, datetime.now(UTC))
    rows = [(0, 0, 400), (1, 180, 460), (2, 360, 520)]  # 3/s consumed, 1/s produced
    insert_snapshots(
        services.database_url, ids, [(p, at(t0, m), c, hw) for p in (0, 1) for m, c, hw in rows]
    )
    run(t0, at(t0, 3))

    response = client.get(
        f"{group.base}/lag",
        params={"since": t0.isoformat(), "until": at(t0, 3).isoformat()},
        headers=group.headers,
    )

    assert response.status_code == 200, response.text
    assert [
        (p["lag"], p["consumeRate"], p["produceRate"], p["timeToDrainS"])
        for p in response.json()["points"]
    ] == [(800, None, None, None), (560, 6.0, 2.0, 140.0), (320, 6.0, 2.0, 80.0)]
    assert response.json()["points"][0]["at"] == t0.isoformat().replace("+00:00", "Z")
    stranger = bearer(new_organisation(services.database_url).keys["production"].secret)
    hidden = client.get(f"{group.base}/lag", headers=stranger)
    assert hidden.status_code == 404
    assert hidden.json()["error"]["code"] == "TOPIC_NOT_FOUND"


def test_the_beat_task_runs_the_job_in_its_own_process_and_skips_empty_windows(
    celery_worker: Path, services: Services, spark: Any
) -> None:
    url, ids, t0 = services.database_url, synthetic_group(), minute(-140)
    insert_snapshots(url, ids, [(0, at(t0, m), 30 * m, 10 + 60 * m) for m in range(3)])

    def on_worker(since: datetime, until: datetime) -> dict[str, Any]:
        kwargs = {"since": since.isoformat(), "until": until.isoformat()}
        sent = celery_app().send_task("spark_pipelines.run_lag_analytics", kwargs=kwargs)
        result: dict[str, Any] = sent.get(timeout=240)
        return result

    report = on_worker(t0, at(t0, 3))

    assert report["points"] >= 3 and "skipped" not in report
    assert points(url, ids, t0) == [
        (0, 10, None, None, None),
        (1, 40, 0.5, 1.0, None),
        (2, 70, 0.5, 1.0, None),
    ]
    empty = on_worker(datetime(2000, 1, 1, tzinfo=UTC), datetime(2000, 1, 1, 0, 10, tzinfo=UTC))
    assert empty["skipped"] == "no snapshots in the window"


def test_the_session_is_local_with_its_ui_off_and_a_bad_master_is_refused(spark: Any) -> None:
    from core.settings import SettingsError
    from spark_pipelines.session import SparkSettings

    assert spark.sparkContext.master == "local[2]"
    assert spark.conf.get("spark.ui.enabled") == "false"
    assert spark.sparkContext.uiWebUrl is None
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert SparkSettings.from_env({}).master == "local[*]"
    assert (
        SparkSettings.from_env({"QUEUECORE_SPARK_MASTER": "spark://10.0.0.5:7077"}).local is False
    )
    with pytest.raises(SettingsError, match="QUEUECORE_SPARK_MASTER"):
        SparkSettings.from_env({"QUEUECORE_SPARK_MASTER": "lokal[2]"})
