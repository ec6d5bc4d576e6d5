"""The usage meter: what went over the real API is what lands in ``usage_hourly``, flushes add up
across flushes and processes, a failed flush loses nothing, shutdown flushes the rest."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient

from billing.meter import HourlyUsage, MeterFlusher, UsageMeter
from core import settings
from core.db import async_pool
from tenants import service as tenants
from tenants.models import NewOrganisation
from tests.data_plane.test_consume_api import Group
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation, run_in_tx
from tests.support.usage import flush, hourly_row, hourly_totals

A_100 = "a" * 98  # JSON-encoded: 100 bytes
B_50 = "b" * 48  # 50 bytes, published with the 2-byte key "k1"


def production(org: NewOrganisation) -> str:
    return org.project.environment("production").id


def size_of(message: dict[str, Any]) -> int:
    """The test's three kinds of message, by their size as metered."""
    if message["headers"]:
        return 107
    return 100 if message["data"] == A_100 else 52


def pull_all(group: Group, member: str, expected: int) -> list[dict[str, Any]]:
    delivered: list[dict[str, Any]] = []
    for _ in range(10):
        delivered += group.pull(member, max_messages=100)
        if len(delivered) >= expected:
            break
    return delivered


def test_published_and_delivered_messages_and_bytes_are_what_went_over_the_api(
    client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    url, org = services.database_url, new_organisation(services.database_url, tier="pro")
    group = Group(client, org, unique, partitions=2)
    group.publish(*[A_100] * 7)
    group.publish(*[B_50] * 3, key="k1")
    with_header = {"data": A_100, "headers": {"trace": "é"}}  # 100 + 5 + 2 bytes (UTF-8)
    sent = client.post(
        f"/v1/topics/{group.topic}/messages", json=with_header, headers=group.headers
    )
    assert sent.status_code == 201
    too_big = client.post(
        f"/v1/topics/{group.topic}/messages", json={"data": "x" * 2**20}, headers=group.headers
    )
    assert too_big.status_code == 413
    delivered = pull_all(group, group.join(), 11)
    browsed = client.get(
        f"/v1/topics/{group.topic}/partitions/0/messages", headers=group.headers
    ).json()["messages"]

    flush(client)

    assert len(delivered) == 11
    published_bytes = 7 * 100 + 3 * 52 + 107
    browsed_bytes = sum(size_of(m) for m in browsed)
    totals = hourly_totals(url, production(org))
    assert (totals["messages_in"], totals["bytes_in"]) == (11, published_bytes)
    assert (totals["messages_out"], totals["bytes_out"]) == (
        11 + len(browsed),
        published_bytes + browsed_bytes,
    )
    assert totals["publish_requests"] == 4  # the refused publish is a request, not a message
    seen = client.get("/v1/usage", headers=group.headers).json()["totals"]
    assert (seen["messagesIn"], seen["bytesIn"], seen["messagesOut"]) == (
        11,
        published_bytes,
        11 + len(browsed),
    )


def test_requests_are_counted_by_category_once_admitted(
    client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    url, org = services.database_url, new_organisation(services.database_url)
    env, headers = production(org), bearer(org.keys["production"].secret)
    publisher = run_in_tx(url, lambda conn: tenants.create_key(conn, env, scopes=["publish"]))
    topic = unique("req")
    assert client.post("/v1/topics", json={"name": topic}, headers=headers).status_code == 201
    for i in range(3):
        sent = client.post(f"/v1/topics/{topic}/messages", json={"data": i}, headers=headers)
        assert sent.status_code == 201
    for _ in range(2):
        browse = client.get(f"/v1/topics/{topic}/partitions/0/messages", headers=headers)
        assert browse.status_code == 200
    assert client.get("/v1/topics", headers=bearer(publisher.secret)).status_code == 403
    assert client.get("/v1/topics").status_code == 401  # no key: nobody to bill

    flush(client)

    totals = hourly_totals(url, env)
    assert (totals["publish_requests"], totals["consume_requests"], totals["admin_requests"]) == (
        3,
        2,
        2,  # the topic's creation and the refused listing
    )
    assert totals["messages_in"] == 3


def test_a_request_refused_by_the_rate_limiter_is_not_metered(
    client: TestClient, services: Services
) -> None:
    org = new_organisation(services.database_url)  # Developer: 10 admin requests per second
    headers = bearer(org.keys["production"].secret)
    statuses = [client.get("/v1/topics", headers=headers).status_code for _ in range(40)]

    flush(client)

    assert statuses.count(429) > 0
    admitted = statuses.count(200)
    assert hourly_totals(services.database_url, production(org))["admin_requests"] == admitted


@contextlib.asynccontextmanager
async def database_pool() -> AsyncIterator[Any]:
    pool = async_pool(settings.database(), "test-meter")
    await pool.open()
    try:
        yield pool
    finally:
        await pool.close()


HOUR = datetime(2002, 2, 2, 10, tzinfo=UTC)


def test_flushes_add_up_across_flushes_and_across_processes(services: Services) -> None:
    env = production(new_organisation(services.database_url))
    now = [(HOUR + timedelta(minutes=30)).timestamp()]

    async def scenario() -> None:
        async with database_pool() as pool:
            first = MeterFlusher(UsageMeter(lambda: now[0]), pool.connection, 60)
            second = MeterFlusher(UsageMeter(lambda: now[0]), pool.connection, 60)
            first.meter.published(env, 2, 200)
            first.meter.request(env, "publish")
            first.meter.published("env_deleted_meanwhile", 9, 900)
            assert await first.flush() == 2
            second.meter.published(env, 3, 300)
            second.meter.delivered(env, 4, 400)
            second.meter.request(env, "consume")
            first.meter.published(env, 1, 100)
            first.meter.request(env, "admin")
            now[0] += 3600  # the next hour gets its own row
            second.meter.delivered(env, 5, 500)
            await asyncio.gather(first.flush(), second.flush())  # two processes at once

    asyncio.run(scenario())

    row = hourly_row(services.database_url, env, HOUR)
    assert row is not None
    assert (row["messages_in"], row["bytes_in"], row["messages_out"], row["bytes_out"]) == (
        6,
        600,
        4,
        400,
    )
    assert (row["publish_requests"], row["consume_requests"], row["admin_requests"]) == (1, 1, 1)
    later = hourly_row(services.database_url, env, HOUR + timedelta(hours=1))
    assert later is not None and (later["messages_out"], later["bytes_out"]) == (5, 500)
    assert hourly_row(services.database_url, "env_deleted_meanwhile", HOUR) is None


def test_a_failed_flush_keeps_its_counts_for_the_next_one(services: Services) -> None:
    env = production(new_organisation(services.database_url))
    meter = UsageMeter(lambda: (HOUR + timedelta(minutes=5)).timestamp())

    @contextlib.asynccontextmanager
    async def unreachable() -> AsyncIterator[Any]:
        raise psycopg.OperationalError("connection refused")
        yield  # pragma: no cover

    async def scenario() -> tuple[int, int]:
        meter.published(env, 5, 50)
        with pytest.raises(psycopg.OperationalError):
            await MeterFlusher(meter, unreachable, 60).flush()
        assert meter.pending() == [HourlyUsage(env, int(HOUR.timestamp()), 5, 50)]
        meter.published(env, 1, 10)
        async with database_pool() as pool:
            flusher = MeterFlusher(meter, pool.connection, 60)
            return await flusher.flush(), await flusher.flush()

    assert asyncio.run(scenario()) == (1, 0)
    row = hourly_row(services.database_url, env, HOUR)
    assert row is not None and (row["messages_in"], row["bytes_in"]) == (6, 60)


@pytest.fixture
def slow_flushes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An app whose meter would flush only every 5 minutes."""
    monkeypatch.setenv("QUEUECORE_USAGE_FLUSH_S", "300")
    settings.meter.cache_clear()
    yield
    monkeypatch.undo()
    settings.meter.cache_clear()


def test_shutdown_flushes_what_the_interval_has_not(
    slow_flushes: None, services: Services, unique: Callable[[str], str]
) -> None:
    from control_plane.app import create_app

    org = new_organisation(services.database_url)
    headers, topic = bearer(org.keys["production"].secret), unique("shutdown")
    with TestClient(app=create_app(), raise_server_exceptions=False) as own:
        assert own.post("/v1/topics", json={"name": topic}, headers=headers).status_code == 201
        batch = {"messages": [{"data": A_100}, {"data": A_100}]}
        published = own.post(f"/v1/topics/{topic}/messages/batch", json=batch, headers=headers)
        assert published.status_code == 201
        assert hourly_totals(services.database_url, production(org))["messages_in"] == 0

    totals = hourly_totals(services.database_url, production(org))
    assert (totals["messages_in"], totals["bytes_in"], totals["publish_requests"]) == (2, 200, 1)
