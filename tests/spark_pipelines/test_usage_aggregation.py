"""The usage aggregation job on a real local SparkSession, over hourly rows with known values."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from core.db import connect
from infra.celery_app import celery_app
from spark_pipelines import cli
from spark_pipelines.tasks import months_due
from tenants.models import NewOrganisation
from tests.support.services import Services
from tests.support.tenancy import new_organisation
from tests.support.usage import insert_hourly

FEBRUARY = date(2020, 2, 1)  # a leap year: 29 days, 696 hours
HOURS_IN_FEBRUARY = 696


@pytest.fixture(scope="module")
def job(spark: Any) -> ModuleType:
    """The job module (imported once the session fixture has found PySpark and Java)."""
    from spark_pipelines import usage_aggregation

    return usage_aggregation


@pytest.fixture
def run(job: ModuleType, spark: Any, services: Services) -> Callable[[date], Any]:
    """Run the job over one month on the session's database."""
    return lambda month: job.run(spark, services.database_url, month)


def hour(month: date, offset_h: int) -> datetime:
    return datetime(month.year, month.month, month.day, tzinfo=UTC) + timedelta(hours=offset_h)


def monthly(url: str, project_id: str, month: date) -> dict[str, Any] | None:
    with connect(url) as conn:
        return conn.execute(
            "SELECT * FROM usage_monthly WHERE project_id = %s AND month = %s", (project_id, month)
        ).fetchone()


def env(org: NewOrganisation, name: str) -> str:
    return org.project.environment(name).id


def storage_every_hour(url: str, environment_id: str, month: date, average: int) -> None:
    """Three samples averaging ``average`` bytes in every hour of the month."""
    with connect(url) as conn:
        conn.execute(
            "INSERT INTO usage_hourly (environment_id, hour, storage_bytes_sum, storage_bytes_max,"
            " storage_samples) SELECT %s, h, %s, %s, 3"
            " FROM generate_series(%s::timestamptz, %s::timestamptz - interval '1 hour',"
            " interval '1 hour') AS h",
            (environment_id, 3 * average, average, hour(month, 0), hour(month, HOURS_IN_FEBRUARY)),
        )


def test_known_hourly_rows_give_known_monthly_quantities_and_estimate(
    run: Callable[[date], Any], services: Services
) -> None:
    url = services.database_url
    pro, developer = new_organisation(url, tier="pro"), new_organisation(url)
    storage_every_hour(url, env(pro, "production"), FEBRUARY, 2 * 10**9)  # 2 GB all month
    insert_hourly(
        url,
        env(pro, "production"),
        hour(FEBRUARY, 0),
        messages_in=1_500_000,
        bytes_in=3 * 10**9,
        messages_out=2_000_000,
        bytes_out=4 * 10**9,
        publish_requests=1000,
        consume_requests=2000,
        admin_requests=10,
    )
    insert_hourly(
        url,
        env(pro, "production"),
        hour(FEBRUARY, 14 * 24 + 12),
        messages_in=500_000,
        bytes_in=10**9,
        publish_requests=500,
        admin_requests=5,
    )
    insert_hourly(
        url,
        env(pro, "staging"),
        hour(FEBRUARY, HOURS_IN_FEBRUARY - 1),
        messages_in=1_000_000,
        bytes_in=10**9,
        messages_out=1_000_000,
        bytes_out=2 * 10**9,
        publish_requests=100,
        consume_requests=100,
        admin_requests=85,
    )
    # The hours either side of the month belong to other months.
    insert_hourly(url, env(pro, "production"), hour(FEBRUARY, -1), messages_in=7_000_000)
    insert_hourly(
        url, env(pro, "development"), hour(FEBRUARY, HOURS_IN_FEBRUARY), messages_in=9_000_000
    )
    insert_hourly(
        url,
        env(developer, "production"),
        hour(FEBRUARY, 3),
        messages_in=2_000_000,
        bytes_out=10**9,
        publish_requests=20,
    )

    report = run(FEBRUARY)

    assert report.projects >= 2 and report.month == FEBRUARY
    row = monthly(url, pro.project.id, FEBRUARY)
    assert row is not None
    assert (row["organisation_id"], row["tier"]) == (pro.organisation.id, "pro")
    assert (row["messages_in"], row["messages_out"]) == (3_000_000, 3_000_000)
    assert (row["bytes_in"], row["bytes_out"]) == (5 * 10**9, 6 * 10**9)
    assert (row["publish_requests"], row["consume_requests"], row["admin_requests"]) == (
        1600,
        2100,
        100,
    )
    assert row["storage_byte_hours"] == 2 * 10**9 * HOURS_IN_FEBRUARY
    assert (row["messages_in_millions"], row["messages_out_millions"]) == (3.0, 3.0)
    assert (row["gb_in"], row["gb_out"], row["requests"]) == (5.0, 6.0, 3800)
    assert row["storage_gb_months"] == pytest.approx(2.0, abs=1e-12)
    assert row["estimated_amount_cents"] == 279  # tests/billing/test_plans.py: $2.79038
    free = monthly(url, developer.project.id, FEBRUARY)
    assert free is not None
    assert (free["tier"], free["messages_in_millions"], free["gb_out"]) == ("developer", 2.0, 1.0)
    assert free["estimated_amount_cents"] == 0


def test_a_rerun_replaces_the_months_rows_and_adds_nothing(
    run: Callable[[date], Any], services: Services
) -> None:
    url, org, june = (
        services.database_url,
        new_organisation(services.database_url),
        date(2020, 6, 1),
    )
    insert_hourly(url, env(org, "production"), hour(june, 5), messages_in=40, bytes_in=4000)
    run(june)
    first = monthly(url, org.project.id, june)
    run(june)
    again = monthly(url, org.project.id, june)
    assert first is not None and again is not None
    assert (again["messages_in"], again["bytes_in"]) == (first["messages_in"], 4000) == (40, 4000)
    assert again["computed_at"] > first["computed_at"]

    insert_hourly(url, env(org, "staging"), hour(june, 6), messages_in=2)  # late usage
    run(june)

    with connect(url) as conn:
        rows = conn.execute(
            "SELECT messages_in FROM usage_monthly WHERE project_id = %s", (org.project.id,)
        ).fetchall()
    assert [r["messages_in"] for r in rows] == [42]


def test_the_beat_task_runs_the_job_in_its_own_process_and_skips_empty_months(
    celery_worker: Path, services: Services, spark: Any
) -> None:
    url, org, april = services.database_url, new_organisation(services.database_url), "2020-04"
    insert_hourly(url, env(org, "production"), hour(date(2020, 4, 1), 0), messages_out=11)

    def on_worker(month: str) -> dict[str, Any]:
        sent = celery_app().send_task(
            "spark_pipelines.run_usage_aggregation", kwargs={"month": month}
        )
        result: dict[str, Any] = sent.get(timeout=240)
        return result

    report = on_worker(april)

    assert report["months"][0]["month"] == april and report["months"][0]["projects"] >= 1
    row = monthly(url, org.project.id, date(2020, 4, 1))
    assert row is not None and row["messages_out"] == 11
    empty = on_worker("2000-01")
    assert empty == {"months": [{"month": "2000-01", "skipped": "no usage in the month"}]}


def test_the_schedule_recomputes_last_month_only_in_the_first_hours_of_a_month() -> None:
    assert months_due(datetime(2024, 3, 1, 2, 59, tzinfo=UTC)) == [
        date(2024, 2, 1),
        date(2024, 3, 1),
    ]
    assert months_due(datetime(2024, 3, 1, 3, 0, tzinfo=UTC)) == [date(2024, 3, 1)]
    assert months_due(datetime(2024, 1, 1, 0, 5, tzinfo=UTC)) == [
        date(2023, 12, 1),
        date(2024, 1, 1),
    ]


def test_the_command_takes_a_month_and_refuses_anything_else() -> None:
    parser = argparse.ArgumentParser()
    cli.add_spark_parser(parser.add_subparsers(dest="command"))

    parsed = parser.parse_args(["spark", "usage-aggregation", "--month", "2020-02"])

    assert (parsed.spark_job, parsed.month) == ("usage-aggregation", FEBRUARY)
    assert parser.parse_args(["spark", "usage-aggregation"]).month is None
    with pytest.raises(SystemExit):
        parser.parse_args(["spark", "usage-aggregation", "--month", "2020-13"])
