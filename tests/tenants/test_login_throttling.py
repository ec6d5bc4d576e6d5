"""Login throttling: failed sign-ins counted per account and address, per address and per account
(from unknown addresses), shared by replicas; an owner is never locked out by someone else's
failures from another address."""

from __future__ import annotations

import asyncio
import re
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis as sync_redis
from litestar.testing import TestClient
from redis.asyncio import Redis

from control_plane.edge.resources import resources_of
from core import settings
from infra.embedded import free_port_block
from tenants import sessions as session_service
from tenants.errors import InvalidCredentials
from tenants.login_throttle import (
    LoginThrottle,
    ThrottlePolicy,
    TooManyLoginAttempts,
    account_digest,
)
from tests.support.logs import LogRecords, captured
from tests.support.processes import replicas
from tests.support.services import Services
from tests.support.tenancy import new_organisation

OWNER_PASSWORD = "correct-horse-battery"  # what tests.support.tenancy gives every owner
WRONG_PASSWORD = "wrong-horse-battery-staple"


def assert_throttled(response: httpx.Response, window_s: float) -> None:
    """A 429 in the documented error body, with a Retry-After inside the window, and no cookie."""
    assert response.status_code == 429, response.text
    body = response.json()["error"]
    assert body["code"] == "RATE_LIMIT_EXCEEDED"
    assert body["status"] == 429
    assert body["requestId"].startswith("req_")
    assert 1 <= int(response.headers["Retry-After"]) <= max(1, round(window_s))
    assert not response.headers.get_list("set-cookie")


def statuses(responses: list[httpx.Response]) -> list[int]:
    """Their status codes, in order."""
    return [response.status_code for response in responses]


# --- the API in this process, with a throttle of the test's choosing --------------------------


@pytest.fixture
def throttled(client: TestClient) -> Iterator[Callable[[ThrottlePolicy], TestClient]]:
    """The shared app with a login throttle of the given policy and Redis keys of its own.

    Every in-process request comes from the same address ("testclient"), so each test counts
    under its own key prefix; the app's own throttle comes back afterwards.
    """
    app = client.app
    before = app.state.get("login_throttle")

    def install(policy: ThrottlePolicy) -> TestClient:
        prefix = f"qc:login-test:{{{secrets.token_hex(6)}}}"
        redis = resources_of(app).redis
        app.state["login_throttle"] = LoginThrottle(redis, policy, key_prefix=prefix)
        client.cookies.clear()
        return client

    yield install
    client.cookies.clear()
    if before is None:
        app.state.pop("login_throttle", None)
    else:
        app.state["login_throttle"] = before


def post_login(http: TestClient | httpx.Client, email: str, password: str) -> httpx.Response:
    """``POST /auth/login``, leaving no cookie behind in a shared client."""
    response = http.post("/auth/login", json={"email": email, "password": password})
    http.cookies.clear()
    return response


@pytest.fixture
def verifications(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """One entry per argon2 verification the login service runs (the real one still runs)."""
    calls: list[str] = []
    real = session_service.verify_password

    def counting(stored_hash: str, password: str) -> bool:
        calls.append(stored_hash)
        return real(stored_hash, password)

    monkeypatch.setattr(session_service, "verify_password", counting)
    return calls


def test_after_too_many_wrong_passwords_even_the_right_one_is_refused_from_that_address(
    services: Services, throttled: Any, verifications: list[str]
) -> None:
    http = throttled(
        ThrottlePolicy(max_failures_per_account_and_address=5, max_failures_per_address=50)
    )
    email = new_organisation(services.database_url).owner_email
    # Any spelling the user lookup accepts counts against the same account.
    spellings = [email, email.upper(), f"  {email} ", email.title(), email]
    wrong = [post_login(http, spelling, WRONG_PASSWORD) for spelling in spellings]
    assert statuses(wrong) == [401] * 5
    assert len(verifications) == 5

    refused = post_login(http, email, OWNER_PASSWORD)
    assert_throttled(refused, window_s=15 * 60)
    assert "sign-in attempts" in refused.json()["error"]["message"]
    assert len(verifications) == 5  # refused without spending an argon2 verification
    assert http.get("/auth/session").status_code == 401


def test_the_lock_lifts_once_the_window_has_passed(services: Services, throttled: Any) -> None:
    http = throttled(
        ThrottlePolicy(
            max_failures_per_account_and_address=2, max_failures_per_address=50, window_ms=5000
        )
    )
    email = new_organisation(services.database_url).owner_email
    # 5 s: two argon2 verifications on a loaded machine must not outlast the window.
    assert statuses([post_login(http, email, WRONG_PASSWORD) for _ in range(2)]) == [401, 401]
    assert_throttled(post_login(http, email, OWNER_PASSWORD), window_s=5)
    time.sleep(5.1)
    assert post_login(http, email, OWNER_PASSWORD).status_code == 200


def test_another_account_from_the_same_address_is_refused_only_at_the_address_limit(
    services: Services, throttled: Any
) -> None:
    http = throttled(
        ThrottlePolicy(max_failures_per_account_and_address=2, max_failures_per_address=4)
    )
    locked, other, third = (new_organisation(services.database_url) for _ in range(3))
    failures = [post_login(http, locked.owner_email, WRONG_PASSWORD) for _ in range(2)]
    assert statuses(failures) == [401, 401]
    assert_throttled(post_login(http, locked.owner_email, OWNER_PASSWORD), window_s=900)
    # Same address, another account: not locked by the first account's failures.
    assert post_login(http, other.owner_email, OWNER_PASSWORD).status_code == 200
    assert post_login(http, other.owner_email, WRONG_PASSWORD).status_code == 401
    assert post_login(http, third.owner_email, WRONG_PASSWORD).status_code == 401
    # Four failures from this address now: every account is refused from here.
    for org in (other, third):
        assert_throttled(post_login(http, org.owner_email, OWNER_PASSWORD), window_s=900)


def test_a_successful_login_forgets_the_accounts_failures(
    services: Services, throttled: Any
) -> None:
    http = throttled(
        ThrottlePolicy(max_failures_per_account_and_address=2, max_failures_per_address=50)
    )
    email = new_organisation(services.database_url).owner_email
    attempts = [WRONG_PASSWORD, OWNER_PASSWORD, WRONG_PASSWORD, OWNER_PASSWORD, WRONG_PASSWORD]
    # Without the reset the fourth attempt would meet two failures and be refused.
    assert statuses([post_login(http, email, p) for p in attempts]) == [401, 200, 401, 200, 401]
    assert post_login(http, email, WRONG_PASSWORD).status_code == 401
    assert_throttled(post_login(http, email, OWNER_PASSWORD), window_s=900)


def test_unknown_emails_are_throttled_exactly_like_known_ones(
    services: Services, throttled: Any
) -> None:
    http = throttled(
        ThrottlePolicy(max_failures_per_account_and_address=2, max_failures_per_address=50)
    )
    known = new_organisation(services.database_url).owner_email
    unknown = f"nobody-{secrets.token_hex(4)}@example.com"
    answers = {
        email: [
            post_login(http, email, password)
            for password in 2 * [WRONG_PASSWORD] + 2 * [OWNER_PASSWORD]
        ]
        for email in (known, unknown)
    }
    assert [comparable(r) for r in answers[known]] == [comparable(r) for r in answers[unknown]]
    assert statuses(answers[unknown]) == [401, 401, 429, 429]
    for response in answers[known][2:] + answers[unknown][2:]:
        assert_throttled(response, window_s=900)


def comparable(response: httpx.Response) -> tuple[int, str, str, bool]:
    """Status, code, message with its seconds blanked, and whether Retry-After was sent."""
    body = response.json()["error"]
    message = re.sub(r"\d+", "N", body["message"])
    return response.status_code, body["code"], message, "retry-after" in response.headers


def test_redis_holds_a_hash_of_the_email_never_the_email_and_forgets_it(
    services: Services, throttled: Any
) -> None:
    policy = ThrottlePolicy(max_failures_per_account_and_address=3, max_failures_per_address=50)
    http = throttled(policy)
    throttle: LoginThrottle = http.app.state["login_throttle"]
    email = new_organisation(services.database_url).owner_email
    assert post_login(http, email.upper(), WRONG_PASSWORD).status_code == 401
    account_key = throttle.account_key(email)
    pair_key = throttle.pair_key(email, "testclient")
    assert account_key.endswith(account_digest(email))
    redis = sync_redis.Redis.from_url(services.redis_url)
    try:
        keys = [k.decode() for k in redis.keys(account_key.split(":account:")[0] + ":*")]
        assert sorted(keys) == sorted([account_key, pair_key, throttle.address_key("testclient")])
        assert not [k for k in keys if "@" in k or email.split("@")[0] in k]
        assert all(0 < redis.pttl(k) <= policy.account_window_ms for k in keys)
        assert redis.zcard(account_key) == redis.zcard(pair_key) == 1
        assert post_login(http, email, OWNER_PASSWORD).status_code == 200
        assert redis.exists(account_key, pair_key) == 0  # a success forgets the failures
        known = throttle.known_key(email, "testclient")  # and remembers where it came from
        assert 0 < redis.pttl(known) <= policy.known_address_ms
    finally:
        redis.close()


# --- the throttle on its own against the real Redis: addresses, outcomes ---------------------


async def attempt(throttle: LoginThrottle, email: str, address: str, *, fail: bool) -> str:
    """One sign-in through ``throttle``: "ok", "failed" or "throttled"."""
    try:
        async with throttle.attempt(email, address):
            if fail:
                raise InvalidCredentials
    except InvalidCredentials:
        return "failed"
    except TooManyLoginAttempts:
        return "throttled"
    return "ok"


def with_throttle(
    services: Services,
    policy: ThrottlePolicy,
    scenario: Callable[[LoginThrottle], Awaitable[list[str]]],
) -> list[str]:
    """Run ``scenario`` on one event loop with a throttle on the session's Redis, keys its own."""

    async def go() -> list[str]:
        redis = Redis.from_url(services.redis_url)
        prefix = f"qc:login-test:{{{secrets.token_hex(6)}}}"
        try:
            return await scenario(LoginThrottle(redis, policy, key_prefix=prefix))
        finally:
            await redis.aclose()

    return asyncio.run(go())


def test_an_address_over_its_limit_does_not_refuse_other_addresses(services: Services) -> None:
    attacker, same_64, elsewhere = "2001:db8:1:2::10", "2001:db8:1:2::99", "2001:db8:1:3::10"

    async def scenario(throttle: LoginThrottle) -> list[str]:
        for index in range(3):
            email = f"user-{index}-{secrets.token_hex(3)}@example.com"
            assert await attempt(throttle, email, attacker, fail=True) == "failed"
        fresh = f"fresh-{secrets.token_hex(3)}@example.com"
        # An IPv6 client is counted by its /64: another address in the same /64 does not help.
        tries = [attacker, same_64, elsewhere, "198.51.100.7", "::ffff:198.51.100.7"]
        return [await attempt(throttle, fresh, address, fail=False) for address in tries]

    policy = ThrottlePolicy(max_failures_per_address=3)
    outcomes = with_throttle(services, policy, scenario)
    assert outcomes == ["throttled", "throttled", "ok", "ok", "ok"]


def test_an_attempt_that_fails_for_another_reason_is_not_counted(services: Services) -> None:
    async def scenario(throttle: LoginThrottle) -> list[str]:
        for _ in range(3):  # the user retrying through a database outage
            with pytest.raises(ConnectionError):
                async with throttle.attempt("someone@example.com", "198.51.100.8"):
                    raise ConnectionError("the metadata store is down")
        return [await attempt(throttle, "someone@example.com", "198.51.100.8", fail=False)]

    policy = ThrottlePolicy(
        max_failures_per_account_and_address=1,
        max_failures_per_address=1,
        max_failures_per_account=1,
    )
    assert with_throttle(services, policy, scenario) == ["ok"]  # not locked out afterwards


def test_failures_from_one_address_do_not_lock_the_owner_out_from_another(
    services: Services,
) -> None:
    email, attacker, owner = f"owner-{secrets.token_hex(3)}@example.com", "203.0.113.9", "192.0.2.4"

    async def scenario(throttle: LoginThrottle) -> list[str]:
        guesses = [await attempt(throttle, email, attacker, fail=True) for _ in range(7)]
        return [*guesses, await attempt(throttle, email, owner, fail=False)]

    outcomes = with_throttle(services, ThrottlePolicy(), scenario)  # the defaults
    assert outcomes == ["failed"] * 5 + ["throttled"] * 2 + ["ok"]


def test_an_account_guessed_from_many_addresses_refuses_new_addresses_but_not_known_ones(
    services: Services,
) -> None:
    email, home = f"owner-{secrets.token_hex(3)}@example.com", "192.0.2.10"

    async def scenario(throttle: LoginThrottle) -> list[str]:
        outcomes = [await attempt(throttle, email, home, fail=False)]  # the owner, earlier
        for n in range(4):  # a botnet: one guess from each of many addresses
            outcomes.append(await attempt(throttle, email, f"198.51.100.{n}", fail=True))
        outcomes.append(await attempt(throttle, email, "203.0.113.50", fail=False))
        outcomes.append(await attempt(throttle, email, home, fail=False))
        return outcomes

    policy = ThrottlePolicy(max_failures_per_account=4)  # 100 by default
    outcomes = with_throttle(services, policy, scenario)
    assert outcomes == ["ok", "failed", "failed", "failed", "failed", "throttled", "ok"]


# --- two real API processes sharing the counts -------------------------------------------------


@pytest.fixture(scope="module")
def two_replicas(
    services: Services, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[list[str], list[Path]]]:
    """Two ``queuecore serve`` processes on the session's services: their URLs and log files."""
    debug = {"QUEUECORE_LOG_LEVEL": "DEBUG", "QUEUECORE_LOG_FORMAT": "json"}
    with replicas(services.env(), tmp_path_factory.mktemp("login-replicas"), 2, debug) as started:
        yield [r.url for r in started], [r.log for r in started]


def fresh_address() -> str:
    """A client address no other test uses (a random /64 of the documentation prefix).

    The replicas trust ``X-Forwarded-For`` from 127.0.0.1, as behind a local proxy.
    """
    return f"2001:db8:{secrets.randbelow(0xFFFF):x}:{secrets.randbelow(0xFFFF):x}::1"


def remote_login(url: str, email: str, password: str, address: str) -> httpx.Response:
    """``POST /auth/login`` to one replica, as if from ``address``."""
    return httpx.post(
        f"{url}/auth/login",
        json={"email": email, "password": password},
        headers={"X-Forwarded-For": address},
        timeout=30,
    )


def test_two_api_processes_share_the_counts(
    services: Services, two_replicas: tuple[list[str], list[Path]]
) -> None:
    (first, second), logs = two_replicas
    email, address = new_organisation(services.database_url).owner_email, fresh_address()
    wrong = [remote_login((first, second)[i % 2], email, WRONG_PASSWORD, address) for i in range(5)]
    assert statuses(wrong) == [401] * 5  # the default: five failures per account and address
    for url in (first, second):
        assert_throttled(remote_login(url, email, OWNER_PASSWORD, address), window_s=15 * 60)
    # Only that address is refused: the owner signs in from another one.
    assert remote_login(second, email, OWNER_PASSWORD, fresh_address()).status_code == 200
    logged = "".join(log.read_text(errors="replace") for log in logs)
    assert "login_throttled" in logged
    assert email not in logged and WRONG_PASSWORD not in logged


def test_a_parallel_burst_of_guesses_gets_exactly_the_limit_checked(
    services: Services, two_replicas: tuple[list[str], list[Path]]
) -> None:
    urls, _ = two_replicas
    email, address = new_organisation(services.database_url).owner_email, fresh_address()
    start = threading.Barrier(16)

    def guess(index: int) -> httpx.Response:
        start.wait()
        return remote_login(urls[index % 2], email, WRONG_PASSWORD, address)

    with ThreadPoolExecutor(16) as pool:
        answers = statuses(list(pool.map(guess, range(16))))
    # Attempts are counted before their password is checked, so racing does not buy guesses.
    assert sorted(answers) == [401] * 5 + [429] * 11, answers


# --- Redis unreachable: logins still work, counted per process ----------------------------------


@pytest.fixture
def throttle_log() -> Iterator[LogRecords]:
    """What the throttle logs (structlog goes through the stdlib logger of its name)."""
    with captured("queuecore.login_throttle") as records:
        yield records


@pytest.fixture
def app_without_redis(services: Services, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """A fresh app whose ``QUEUECORE_REDIS_URL`` names a port nothing listens on."""
    from control_plane.app import create_app

    monkeypatch.setenv("QUEUECORE_REDIS_URL", f"redis://127.0.0.1:{free_port_block()}/0")
    settings.clear_caches()
    with TestClient(app=create_app(), raise_server_exceptions=False) as app_client:
        yield app_client
    monkeypatch.setenv("QUEUECORE_REDIS_URL", services.redis_url)
    settings.clear_caches()


def test_redis_unreachable_logins_still_work_and_a_warning_is_logged(
    services: Services, app_without_redis: TestClient, throttle_log: LogRecords
) -> None:
    http = app_without_redis
    redis = resources_of(http.app).redis
    policy = ThrottlePolicy(max_failures_per_account_and_address=2, max_failures_per_address=50)
    http.app.state["login_throttle"] = LoginThrottle(redis, policy)
    email = new_organisation(services.database_url).owner_email

    assert post_login(http, email, OWNER_PASSWORD).status_code == 200  # not a 500
    # Still throttled meanwhile, by this process alone.
    assert statuses([post_login(http, email, WRONG_PASSWORD) for _ in range(2)]) == [401, 401]
    assert_throttled(post_login(http, email, OWNER_PASSWORD), window_s=900)

    warnings = [m for m in throttle_log.messages if "login_throttle_redis_unavailable" in m]
    assert len(warnings) == 1, throttle_log.messages  # once, not once per attempt
    assert not [m for m in throttle_log.messages if email in m or OWNER_PASSWORD in m]
