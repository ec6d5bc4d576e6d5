"""``GET /v1/usage``: buckets and totals over known hourly rows, the window, validation, tenant
isolation and the admin scope."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from litestar.testing import TestClient

from billing.usage import month_bounds
from tenants import service as tenants
from tenants.models import NewOrganisation
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation, run_in_tx
from tests.support.usage import insert_hourly

DAY = datetime(2024, 3, 10, tzinfo=UTC)


def at(hours: int) -> datetime:
    return DAY + timedelta(hours=hours)


def env_id(org: NewOrganisation, name: str = "production") -> str:
    return org.project.environment(name).id


def usage(client: TestClient, org: NewOrganisation, env: str = "production", **params: str) -> Any:
    response = client.get("/v1/usage", params=params, headers=bearer(org.keys[env].secret))
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture(scope="module")
def metered(services: Services) -> NewOrganisation:
    """A Pro organisation with known rows on 10 and 11 March 2024, and some just outside."""
    url, org = services.database_url, new_organisation(services.database_url, tier="pro")
    env = env_id(org)
    insert_hourly(
        url,
        env,
        at(22),
        messages_in=10,
        bytes_in=1000,
        messages_out=4,
        bytes_out=400,
        publish_requests=2,
        consume_requests=3,
        admin_requests=1,
        storage_bytes_sum=300,  # three samples: 100 bytes on average
        storage_bytes_max=120,
        storage_samples=3,
    )
    insert_hourly(
        url,
        env,
        at(23),
        messages_in=5,
        bytes_in=500,
        storage_bytes_sum=200,
        storage_bytes_max=100,
        storage_samples=2,
    )
    insert_hourly(url, env, at(25), messages_out=7, bytes_out=700, admin_requests=4)
    insert_hourly(url, env, at(-1), messages_in=2000)  # before the window
    insert_hourly(url, env, at(48), messages_in=1000)  # after it
    return org


def amounts(item: dict[str, Any]) -> tuple[Any, ...]:
    requests = item["requests"]
    return (
        item["messagesIn"],
        item["bytesIn"],
        item["messagesOut"],
        item["bytesOut"],
        (requests["publish"], requests["consume"], requests["admin"], requests["total"]),
        item["storageByteHours"],
        item["storageBytesMax"],
    )


ZERO = (0, 0, 0, 0, (0, 0, 0, 0), 0.0, 0)


def test_hourly_buckets_list_every_hour_of_the_window_with_the_totals(
    client: TestClient, metered: NewOrganisation
) -> None:
    body = usage(client, metered, **{"from": "2024-03-10", "to": "2024-03-12"}, granularity="hour")

    assert (body["from"], body["to"], body["granularity"]) == (
        "2024-03-10T00:00:00Z",
        "2024-03-12T00:00:00Z",
        "hour",
    )
    assert len(body["buckets"]) == 48
    assert body["buckets"][1]["start"] == "2024-03-10T01:00:00Z"
    assert amounts(body["buckets"][22]) == (10, 1000, 4, 400, (2, 3, 1, 6), 100.0, 120)
    assert amounts(body["buckets"][23]) == (5, 500, 0, 0, (0, 0, 0, 0), 100.0, 100)
    assert amounts(body["buckets"][25]) == (0, 0, 7, 700, (0, 0, 4, 4), 0.0, 0)
    assert {amounts(b) for i, b in enumerate(body["buckets"]) if i not in (22, 23, 25)} == {ZERO}
    assert amounts(body["totals"]) == (15, 1500, 11, 1100, (2, 3, 5, 10), 200.0, 120)
    assert (body["environmentId"], body["environment"], body["projectId"]) == (
        env_id(metered),
        "production",
        metered.project.id,
    )


def test_daily_buckets_sum_the_hours_of_each_utc_day(
    client: TestClient, metered: NewOrganisation
) -> None:
    # 22:30 at +01:00 is 21:30 UTC: the window starts at that UTC day.
    body = usage(client, metered, **{"from": "2024-03-10T22:30:00+01:00", "to": "2024-03-11T12:00"})

    assert (body["from"], body["to"], body["granularity"]) == (
        "2024-03-10T00:00:00Z",
        "2024-03-12T00:00:00Z",
        "day",
    )
    assert [b["start"] for b in body["buckets"]] == ["2024-03-10T00:00:00Z", "2024-03-11T00:00:00Z"]
    assert amounts(body["buckets"][0]) == (15, 1500, 4, 400, (2, 3, 1, 6), 200.0, 120)
    assert amounts(body["buckets"][1]) == (0, 0, 7, 700, (0, 0, 4, 4), 0.0, 0)
    hourly = usage(
        client,
        metered,
        **{"from": "2024-03-10T22:30:00+01:00", "to": "2024-03-11T01:00"},
        granularity="hour",
    )
    assert hourly["from"] == "2024-03-10T21:00:00Z"
    assert [b["messagesIn"] for b in hourly["buckets"]] == [0, 10, 5, 0]


def test_the_default_window_is_the_current_calendar_month_by_day(
    client: TestClient, metered: NewOrganisation
) -> None:
    before = month_bounds(datetime.now(UTC))
    body = usage(client, metered)
    after = month_bounds(datetime.now(UTC))

    start, end = next(b for b in (before, after) if b[0].isoformat()[:10] == body["from"][:10])
    assert body["from"] == start.isoformat().replace("+00:00", "Z")
    assert body["to"] == end.isoformat().replace("+00:00", "Z")
    assert body["granularity"] == "day"
    assert len(body["buckets"]) == (end - start).days


def test_the_tier_and_its_limits_come_with_the_usage(
    client: TestClient, metered: NewOrganisation, services: Services
) -> None:
    window = {"from": "2024-03-10", "to": "2024-03-11"}
    pro = usage(client, metered, **window)["tier"]
    developer = usage(client, new_organisation(services.database_url), **window)

    assert pro["name"] == "pro"
    assert (pro["limits"]["publishPerS"], pro["limits"]["maxTopics"]) == (1000, 200)
    assert developer["tier"]["name"] == "developer"
    assert developer["tier"]["limits"]["maxMessageBytes"] == 256 * 1024


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"from": "yesterday"}, "from"),
        ({"to": "2024-13-01"}, "to"),
        ({"granularity": "week"}, "granularity"),
        ({"from": "2024-03-12", "to": "2024-03-10"}, "from"),
        ({"from": "2024-01-01", "to": "2024-03-01", "granularity": "hour"}, "to"),
        ({"from": "2020-01-01", "to": "2024-01-01"}, "to"),
        ({"from": "0001-01-01T00:00:00+05:00"}, "from"),
    ],
)
def test_a_bad_window_is_422_with_the_documented_error_body(
    client: TestClient, metered: NewOrganisation, params: dict[str, str], field: str
) -> None:
    response = client.get(
        "/v1/usage", params=params, headers=bearer(metered.keys["production"].secret)
    )

    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert (error["code"], error["status"]) == ("VALIDATION_ERROR", 422)
    assert error["requestId"].startswith("req_")
    assert error["details"][0]["field"] == field
    assert response.headers["x-request-id"] == error["requestId"]


def test_a_key_sees_its_own_environment_only(
    client: TestClient, metered: NewOrganisation, services: Services
) -> None:
    url, window = services.database_url, {"from": "2024-03-10", "to": "2024-03-12"}
    insert_hourly(url, env_id(metered, "staging"), at(22), messages_in=3, admin_requests=1)
    stranger = new_organisation(services.database_url, tier="pro")

    staging = usage(client, metered, "staging", **window)
    production = usage(client, metered, **window)
    other = usage(client, stranger, **window)

    assert (staging["environment"], staging["totals"]["messagesIn"]) == ("staging", 3)
    assert staging["totals"]["requests"]["total"] == 1
    assert production["totals"]["messagesIn"] == 15
    assert other["environmentId"] == env_id(stranger)
    assert {amounts(b) for b in other["buckets"]} == {ZERO}
    assert amounts(other["totals"]) == ZERO


def test_usage_needs_the_admin_scope(client: TestClient, services: Services) -> None:
    org = new_organisation(services.database_url)
    env = env_id(org)
    worker = run_in_tx(
        services.database_url,
        lambda conn: tenants.create_key(conn, env, scopes=["publish", "consume"]),
    )

    response = client.get("/v1/usage", headers=bearer(worker.secret))

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "FORBIDDEN"
    assert client.get("/v1/usage").status_code == 401
