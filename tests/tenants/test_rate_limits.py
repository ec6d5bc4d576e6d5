"""Tier rate limits: a shared sliding window in Redis, per key and category, across replicas."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis as sync_redis
from litestar import Controller, Router, get
from litestar.middleware import DefineMiddleware
from litestar.testing import TestClient
from redis.asyncio import Redis

from control_plane.edge.auth import ApiKeyAuthenticationMiddleware, requires_scope
from control_plane.edge.rate_limit import rate_limit_middleware
from core import settings
from infra.embedded import EmbeddedRedis, free_port_block
from tenants import rate_limits
from tenants import service as tenants
from tenants.models import NewOrganisation
from tenants.rate_limits import RateLimiter
from tenants.tiers import Category, Limits
from tests.support.logs import LogRecords, captured
from tests.support.processes import replicas
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation, run_in_tx

WINDOW_S = 1.05  # a little over the one-second window, so earlier requests have left it


# --- the limiter on its own, against the real Redis -------------------------------------------


def _limiter_hits(
    services: Services,
    org: NewOrganisation,
    category: Category,
    n: int,
    loads: list[str] | None = None,
) -> list[rate_limits.Decision]:
    """``n`` concurrent hits on the development key through a fresh limiter (its own process).

    Each load of the organisation's limits from PostgreSQL is appended to ``loads``.
    """

    async def load(organisation_id: str) -> Limits:
        if loads is not None:
            loads.append(organisation_id)
        return await _org_limits(services.database_url, organisation_id)

    async def go() -> list[rate_limits.Decision]:
        redis = Redis.from_url(services.redis_url)
        try:
            limiter = RateLimiter(redis, load)
            key_id = org.keys["development"].key.id
            return list(
                await asyncio.gather(
                    *(limiter.hit(org.organisation.id, key_id, category) for _ in range(n))
                )
            )
        finally:
            await redis.aclose()

    return asyncio.run(go())


async def _org_limits(database_url: str, organisation_id: str) -> Limits:
    import psycopg
    from psycopg.rows import dict_row

    async with await psycopg.AsyncConnection.connect(database_url, row_factory=dict_row) as conn:
        return await rate_limits.organisation_limits(conn, organisation_id)


@pytest.mark.parametrize(("category", "limit"), [("publish", 100), ("consume", 50)])
def test_developer_burst_of_three_times_the_limit_lets_the_limit_through(
    services: Services, category: Category, limit: int
) -> None:
    org = new_organisation(services.database_url)
    decisions = _limiter_hits(services, org, category, 3 * limit)
    allowed = [d for d in decisions if d.allowed]
    assert abs(len(allowed) - limit) <= limit // 10
    refused = [d for d in decisions if not d.allowed]
    assert refused and all(d.retry_after_s >= 1 and d.remaining == 0 for d in refused)
    assert {d.limit for d in decisions} == {limit}


def test_a_burst_on_a_cold_organisation_loads_its_limits_once(services: Services) -> None:
    # Loading per request made 300 PostgreSQL connections at once; the busy event loop then
    # timed the Redis calls out and the limiter fell back to per-process limits.
    org = new_organisation(services.database_url)
    loads: list[str] = []
    decisions = _limiter_hits(services, org, "publish", 300, loads)
    assert loads == [org.organisation.id]
    assert sum(d.allowed for d in decisions) == 100


def test_enterprise_custom_publish_limit_is_honoured_by_the_limiter(services: Services) -> None:
    org = new_organisation(services.database_url, tier="enterprise")
    run_in_tx(
        services.database_url,
        lambda conn: tenants.set_tier(
            conn, org.organisation.id, "enterprise", {"publish_per_s": 7}
        ),
    )
    decisions = _limiter_hits(services, org, "publish", 21)
    assert sum(d.allowed for d in decisions) == 7
    # consume was not customised: Enterprise's own default applies
    assert _limiter_hits(services, org, "consume", 1)[0].limit == 500


def test_rate_limit_keys_are_namespaced_and_expire(services: Services) -> None:
    org = new_organisation(services.database_url)
    _limiter_hits(services, org, "admin", 3)
    client = sync_redis.Redis.from_url(services.redis_url)
    try:
        keys = client.keys(f"qc:rl:{{{org.organisation.id}}}:*")
        assert len(keys) == 2, keys  # the organisation's limits and the key's admin window
        assert all(0 < client.pttl(key) <= rate_limits.LIMITS_TTL_S * 1000 for key in keys)
        time.sleep(WINDOW_S)
        assert client.keys(f"qc:rl:{{{org.organisation.id}}}:*:admin") == []
    finally:
        client.close()


class _CountingRedis(Redis):
    """The real client, counting the script calls made through it."""

    scripts = 0

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        if args and args[0] in ("EVALSHA", "EVAL"):
            self.scripts += 1
        return await super().execute_command(*args, **options)


def _busy_key_rounds(
    services: Services, org: NewOrganisation, limiters: int, rounds: int, per_round: int
) -> tuple[list[rate_limits.Decision], int]:
    """``rounds`` back-to-back bursts of ``per_round`` publish hits, spread over ``limiters``
    limiters (as over replicas), each on its own connection; the decisions and script calls."""

    async def load(organisation_id: str) -> Limits:
        return await _org_limits(services.database_url, organisation_id)

    async def go() -> tuple[list[rate_limits.Decision], int]:
        pipes = [_CountingRedis.from_url(services.redis_url) for _ in range(limiters)]
        try:
            each = [RateLimiter(pipe, load) for pipe in pipes]
            key_id = org.keys["production"].key.id
            decisions: list[rate_limits.Decision] = []
            for _ in range(rounds):
                decisions += await asyncio.gather(
                    *(
                        each[i % limiters].hit(org.organisation.id, key_id, "publish")
                        for i in range(per_round)
                    )
                )
            return decisions, sum(pipe.scripts for pipe in pipes)
        finally:
            for pipe in pipes:
                await pipe.aclose()

    return asyncio.run(go())


def _custom_publish_limit(services: Services, per_s: int) -> NewOrganisation:
    org = new_organisation(services.database_url, tier="enterprise")
    run_in_tx(
        services.database_url,
        lambda conn: tenants.set_tier(
            conn, org.organisation.id, "enterprise", {"publish_per_s": per_s}
        ),
    )
    return org


def test_a_busy_key_is_counted_with_a_few_script_calls_not_one_per_request(
    services: Services,
) -> None:
    org = _custom_publish_limit(services, 100_000)
    decisions, scripts = _busy_key_rounds(services, org, 1, rounds=50, per_round=20)
    assert all(d.allowed for d in decisions)
    assert scripts <= 100, scripts  # 1,000 requests; one call per request before slots were leased
    client = sync_redis.Redis.from_url(services.redis_url)
    try:
        window = rate_limits.window_key(
            org.organisation.id, org.keys["production"].key.id, "publish"
        )
        assert client.zcard(window) >= 1000  # every admitted request is in the shared window
    finally:
        client.close()


def test_slots_reserved_ahead_never_let_a_busy_key_past_its_limit(services: Services) -> None:
    org = _custom_publish_limit(services, 200)
    decisions, _ = _busy_key_rounds(services, org, 2, rounds=15, per_round=40)
    allowed = sum(d.allowed for d in decisions)
    # 600 requests in well under a second (a few dozen script calls): at most the limit, and at most one
    # reserve-ahead share (limit / PREFETCH_SHARE) per replica left unspent
    assert 200 - 2 * (200 // rate_limits.PREFETCH_SHARE) <= allowed <= 200, allowed
    refused = [d for d in decisions if not d.allowed]
    assert refused and all(d.remaining == 0 and d.retry_after_s >= 1 for d in refused)


# --- two real API processes sharing one budget ------------------------------------------------


@pytest.fixture(scope="module")
def two_replicas(
    services: Services, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[str]]:
    """Two ``queuecore serve`` processes on the session's services; yields their base URLs."""
    with replicas(services.env(), tmp_path_factory.mktemp("replicas")) as started:
        yield [r.url for r in started]


def _burst(urls: list[str], secret: str, n: int, path: str = "/v1/keys") -> list[httpx.Response]:
    """``n`` concurrent GETs, released together and spread evenly over ``urls``."""
    start = threading.Barrier(n)

    def one(http: httpx.Client, index: int) -> httpx.Response:
        start.wait()
        return http.get(urls[index % len(urls)] + path, headers=bearer(secret))

    limits = httpx.Limits(max_connections=n)
    with httpx.Client(timeout=30, limits=limits) as http, ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda i: one(http, i), range(n)))


def _warm(urls: list[str], secret: str) -> None:
    """Authenticate once on each replica, then let those requests leave the window."""
    for url in urls:
        assert httpx.get(url + "/v1/keys", headers=bearer(secret)).status_code == 200
    time.sleep(WINDOW_S)


def _assert_429(response: httpx.Response, limit: int) -> None:
    body = response.json()["error"]
    assert body["code"] == "RATE_LIMIT_EXCEEDED"
    assert body["status"] == 429
    assert body["requestId"].startswith("req_")
    assert int(response.headers["Retry-After"]) >= 1
    assert response.headers["X-RateLimit-Limit"] == str(limit)
    assert response.headers["X-RateLimit-Remaining"] == "0"
    assert int(response.headers["X-RateLimit-Reset"]) >= 1


def test_admin_budget_is_shared_by_two_api_processes(
    services: Services, two_replicas: list[str]
) -> None:
    org = new_organisation(services.database_url)
    secret = org.keys["production"].secret
    _warm(two_replicas, secret)
    responses = _burst(two_replicas, secret, 30)
    ok = [r for r in responses if r.status_code == 200]
    limited = [r for r in responses if r.status_code == 429]
    assert len(ok) + len(limited) == 30, {r.status_code for r in responses}
    assert 9 <= len(ok) <= 11  # one budget of 10, not 10 per process
    for response in limited:
        _assert_429(response, 10)
    remaining = sorted(int(r.headers["X-RateLimit-Remaining"]) for r in ok)
    assert remaining[0] == 0 and remaining[-1] >= 8
    assert {r.headers["X-RateLimit-Limit"] for r in ok} == {"10"}


def test_tier_change_by_cli_applies_on_the_next_request(
    services: Services, two_replicas: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from infra.cli import main

    org = new_organisation(services.database_url)
    secret = org.keys["development"].secret
    _warm(two_replicas, secret)
    before = _burst(two_replicas, secret, 30)
    assert 9 <= sum(r.status_code == 200 for r in before) <= 11
    assert main(["tenants", "set-tier", "--org", org.organisation.id, "--tier", "pro"]) == 0
    assert '"appliedNow": true' in capsys.readouterr().out
    # no wait: the spent budget of 10 is still in the window, and Pro allows 50
    after = _burst(two_replicas, secret, 30)
    assert [r.status_code for r in after] == [200] * 30
    assert {r.headers["X-RateLimit-Limit"] for r in after} == {"50"}


def test_tier_change_by_service_applies_on_the_next_request(
    services: Services, client: TestClient
) -> None:
    org = new_organisation(services.database_url, tier="pro")
    headers = bearer(org.keys["staging"].secret)
    assert client.get("/v1/keys", headers=headers).headers["X-RateLimit-Limit"] == "50"

    async def downgrade(conn: Any) -> None:
        organisation = await tenants.set_tier(conn, org.organisation.id, "developer")
        await conn.commit()
        redis = Redis.from_url(services.redis_url)
        try:
            await rate_limits.publish_limits(redis, organisation.id, organisation.limits)
        finally:
            await redis.aclose()

    run_in_tx(services.database_url, downgrade)
    statuses = [client.get("/v1/keys", headers=headers).status_code for _ in range(12)]
    assert statuses.count(429) >= 2  # at most 10 admin requests per second now
    assert client.get("/v1/keys", headers=headers).headers["X-RateLimit-Limit"] == "10"


def test_enterprise_custom_admin_limit_over_http(services: Services, client: TestClient) -> None:
    from infra.cli import main

    org = new_organisation(services.database_url)
    args = ["--org", org.organisation.id, "--tier", "enterprise", "--limits", '{"admin_per_s": 3}']
    assert main(["tenants", "set-tier", *args]) == 0
    headers = bearer(org.keys["production"].secret)
    responses = [client.get("/v1/keys", headers=headers) for _ in range(9)]
    assert [r.status_code for r in responses].count(200) == 3
    limited = [r for r in responses if r.status_code == 429]
    assert len(limited) == 6
    for response in limited:
        assert response.json()["error"]["code"] == "RATE_LIMIT_EXCEEDED"
        assert response.headers["X-RateLimit-Limit"] == "3"


# --- publish and consume categories through the same middleware ------------------------------


class _CategoryProbe(Controller):
    """Test-only routes, one per category, behind the /v1 middleware and guards."""

    path = "/"

    @get("/publish", opt={"scope": "publish"})
    async def publish(self) -> dict[str, str]:
        """A publish-category route."""
        return {"ok": "publish"}

    @get("/consume", opt={"scope": "consume"})
    async def consume(self) -> dict[str, str]:
        """A consume-category route."""
        return {"ok": "consume"}


@pytest.fixture
def probe_client(services: Services) -> Iterator[TestClient]:
    """The real app plus the probe routes under ``/v1-test``, with the /v1 middleware."""
    from control_plane.app import create_app

    router = Router(
        path="/v1-test",
        route_handlers=[_CategoryProbe],
        middleware=[DefineMiddleware(ApiKeyAuthenticationMiddleware), rate_limit_middleware],
        guards=[requires_scope],
    )
    with TestClient(app=create_app([router]), raise_server_exceptions=False) as test_client:
        yield test_client


def test_each_category_has_its_own_budget_and_tier_rate(
    services: Services, probe_client: TestClient
) -> None:
    org = new_organisation(services.database_url)
    headers = bearer(org.keys["development"].secret)
    admin = [probe_client.get("/v1/keys", headers=headers) for _ in range(12)]
    assert [r.status_code for r in admin].count(429) >= 2
    publish = probe_client.get("/v1-test/publish", headers=headers)
    consume = probe_client.get("/v1-test/consume", headers=headers)
    assert publish.status_code == consume.status_code == 200  # admin being spent does not matter
    assert publish.headers["X-RateLimit-Limit"] == "100"
    assert consume.headers["X-RateLimit-Limit"] == "50"
    assert int(publish.headers["X-RateLimit-Remaining"]) == 99


# --- Redis unreachable: each process enforces the same limits in memory ----------------------


@pytest.fixture
def redis_url_of_app(services: Services, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Build apps whose ``QUEUECORE_REDIS_URL`` is chosen by the test; restored afterwards."""
    from control_plane.app import create_app

    def build(redis_url: str) -> TestClient:
        monkeypatch.setenv("QUEUECORE_REDIS_URL", redis_url)
        settings.clear_caches()
        return TestClient(app=create_app(), raise_server_exceptions=False)

    yield build
    monkeypatch.setenv("QUEUECORE_REDIS_URL", services.redis_url)
    settings.clear_caches()


@pytest.fixture
def rate_limit_log() -> Iterator[LogRecords]:
    """What the limiter logs (structlog goes through the stdlib logger of its name)."""
    with captured("queuecore.rate_limit") as records:
        yield records


def test_redis_unreachable_fails_open_to_per_process_limits(
    services: Services, redis_url_of_app: Any, rate_limit_log: LogRecords
) -> None:
    org = new_organisation(services.database_url)
    headers = bearer(org.keys["development"].secret)
    with redis_url_of_app(f"redis://127.0.0.1:{free_port_block()}/0") as app_client:
        responses = [app_client.get("/v1/keys", headers=headers) for _ in range(15)]
    statuses = [r.status_code for r in responses]
    assert statuses.count(200) == 10 and statuses.count(429) == 5, statuses
    _assert_429(responses[-1], 10)
    assert responses[0].headers["X-RateLimit-Limit"] == "10"
    warnings = [m for m in rate_limit_log.messages if "redis_unavailable" in m]
    assert len(warnings) == 1  # logged once, not once per request


def test_limits_move_back_to_redis_when_it_returns(
    services: Services,
    redis_url_of_app: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    rate_limit_log: LogRecords,
) -> None:
    monkeypatch.setattr(rate_limits, "REDIS_RETRY_S", 0.2)
    server = EmbeddedRedis(tmp_path / "redis", tmp_path / "logs", free_port_block())
    server.start()
    org = new_organisation(services.database_url)
    headers = bearer(org.keys["production"].secret)
    window = f"qc:rl:{{{org.organisation.id}}}:{org.keys['production'].key.id}:admin"
    try:
        with redis_url_of_app(server.url) as app_client:
            assert app_client.get("/v1/keys", headers=headers).status_code == 200
            server.stop()
            down = [app_client.get("/v1/keys", headers=headers).status_code for _ in range(3)]
            assert down == [200, 200, 200]  # served, not 500, while Redis is gone
            server.start()
            time.sleep(0.3)
            assert app_client.get("/v1/keys", headers=headers).status_code == 200
        client = sync_redis.Redis.from_url(server.url)
        assert client.zcard(window) >= 1  # counted in Redis again
        client.close()
    finally:
        server.stop()
    assert any("redis_recovered" in m for m in rate_limit_log.messages)
