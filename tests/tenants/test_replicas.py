"""Key state across caches and API replicas: revocation within 5 s, last-used times, expiry."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from litestar.testing import TestClient

from infra.embedded import free_port_block
from tests.support.processes import http_status, queuecore, stop, wait_for
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation

REVOCATION_DEADLINE_S = 5.0
LAST_USED_DEADLINE_S = 12.0  # flushed every 5 s by each replica, plus slack


@pytest.fixture(scope="module")
def replicas(
    services: Services, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """Two independent ``queuecore serve`` processes on the session's services."""
    tmp_path = tmp_path_factory.mktemp("replicas")
    ports = [free_port_block(), free_port_block()]
    procs = []
    for index, port in enumerate(ports):
        env = {**services.env(), "QUEUECORE_HTTP_PORT": str(port), "QUEUECORE_HTTP_WORKERS": "1"}
        procs.append((queuecore(["serve"], env, tmp_path / f"serve{index}.log"), port, index))
    try:
        for proc, port, index in procs:
            url = f"http://127.0.0.1:{port}/readyz"
            log = tmp_path / f"serve{index}.log"
            wait_for(lambda url=url: http_status(url) == 200, 60, f"replica {index}", proc, log)
        with (
            httpx.Client(base_url=f"http://127.0.0.1:{ports[0]}", timeout=10) as one,
            httpx.Client(base_url=f"http://127.0.0.1:{ports[1]}", timeout=10) as two,
        ):
            yield one, two
    finally:
        for proc, _, _ in procs:
            stop(proc)


def test_revocation_reaches_the_other_replica_within_5_s(
    replicas: tuple[httpx.Client, httpx.Client], services: Services
) -> None:
    one, two = replicas
    org = new_organisation(services.database_url, tier="pro")  # polling stays under the limit
    admin = bearer(org.keys["production"].secret)
    created = one.post("/v1/keys", json={"name": "to revoke"}, headers=admin)
    assert created.status_code == 201, created.text
    key = created.json()
    for replica in (one, two):  # both replicas now hold the key in their cache
        assert replica.get("/v1/keys", headers=bearer(key["key"])).status_code == 200

    assert one.delete(f"/v1/keys/{key['id']}", headers=admin).status_code == 200
    revoked_at = time.monotonic()
    response = two.get("/v1/keys", headers=bearer(key["key"]))
    while response.status_code != 401 and time.monotonic() - revoked_at < 2 * REVOCATION_DEADLINE_S:
        time.sleep(0.1)
        response = two.get("/v1/keys", headers=bearer(key["key"]))
    seen_after_s = time.monotonic() - revoked_at
    assert response.status_code == 401, response.text
    assert response.json()["error"]["code"] == "INVALID_API_KEY"
    assert seen_after_s <= REVOCATION_DEADLINE_S, f"replica 2 accepted it for {seen_after_s:.1f}s"
    print(f"revocation seen by replica 2 after {seen_after_s:.2f}s")


def test_last_used_time_is_recorded_from_another_replica(
    replicas: tuple[httpx.Client, httpx.Client], services: Services
) -> None:
    one, two = replicas
    org = new_organisation(services.database_url, tier="pro")
    admin = bearer(org.keys["production"].secret)
    key = one.post("/v1/keys", json={"name": "fresh"}, headers=admin).json()
    assert key["lastUsedAt"] is None
    before = datetime.now(UTC) - timedelta(seconds=1)
    assert two.get("/v1/keys", headers=bearer(key["key"])).status_code == 200

    deadline = time.monotonic() + LAST_USED_DEADLINE_S
    last_used = None
    while last_used is None and time.monotonic() < deadline:
        time.sleep(0.5)
        listed = {k["id"]: k for k in one.get("/v1/keys", headers=admin).json()["keys"]}
        last_used = listed[key["id"]]["lastUsedAt"]
    assert last_used is not None, f"lastUsedAt still empty after {LAST_USED_DEADLINE_S}s"
    assert datetime.fromisoformat(last_used) >= before


def test_an_expired_key_is_refused_even_while_cached(
    client: TestClient, services: Services
) -> None:
    org = new_organisation(services.database_url)
    admin = bearer(org.keys["development"].secret)
    expires_at = datetime.now(UTC) + timedelta(seconds=3)
    created = client.post("/v1/keys", json={"expiresAt": expires_at.isoformat()}, headers=admin)
    assert created.status_code == 201, created.text
    secret = created.json()["key"]

    sleep_until(expires_at - timedelta(seconds=0.8))
    # This lookup caches the key for 2 s, well past its expiry.
    assert client.get("/v1/keys", headers=bearer(secret)).status_code == 200
    sleep_until(expires_at + timedelta(seconds=0.2))
    response = client.get("/v1/keys", headers=bearer(secret))
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "INVALID_API_KEY"
    listed = client.get("/v1/keys", headers=admin).json()["keys"]
    assert created.json()["id"] not in {k["id"] for k in listed if k["status"] == "active"}


def sleep_until(moment: datetime) -> None:
    """Sleep until the wall clock reaches ``moment``."""
    time.sleep(max(0.0, (moment - datetime.now(UTC)).total_seconds()))
