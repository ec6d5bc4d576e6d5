"""A backing service that is down gives 503 with the error body, never a 500 or a hang."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from litestar.testing import TestClient

from core import settings
from infra.embedded import free_port_block
from tests.support.services import Services


@pytest.fixture
def degraded_client(services: Services, request: pytest.FixtureRequest) -> Iterator[TestClient]:
    """The app with one service URL pointing at a port where nothing listens."""
    from control_plane.app import create_app

    variable, dead_url = request.param
    port = free_port_block()
    saved = os.environ.get(variable)
    os.environ[variable] = dead_url.format(port=port)
    settings.clear_caches()
    try:
        with TestClient(app=create_app(), raise_server_exceptions=False) as client:
            yield client
    finally:
        os.environ[variable] = saved or ""
        settings.clear_caches()


DEAD = {
    "postgres": ("QUEUECORE_DATABASE_URL", "postgresql://postgres@127.0.0.1:{port}/queuecore"),
    "redis": ("QUEUECORE_REDIS_URL", "redis://127.0.0.1:{port}/0"),
    "s3": ("QUEUECORE_S3_ENDPOINT_URL", "http://127.0.0.1:{port}"),
}


@pytest.mark.parametrize("degraded_client", list(DEAD.values()), ids=list(DEAD), indirect=True)
def test_readyz_is_503_naming_the_missing_service(
    degraded_client: TestClient, request: pytest.FixtureRequest
) -> None:
    name = request.node.callspec.id
    response = degraded_client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["error"]["code"] == "SERVICE_UNAVAILABLE"
    assert name in body["error"]["message"]
    assert body["checks"][name] != "ok"
    assert sorted(k for k, v in body["checks"].items() if v == "ok") == sorted(
        k for k in DEAD if k != name
    )


@pytest.mark.parametrize("degraded_client", [DEAD["postgres"]], ids=["postgres"], indirect=True)
def test_api_call_while_postgres_is_down_is_503_not_500(degraded_client: TestClient) -> None:
    response = degraded_client.get(
        "/v1/keys", headers={"Authorization": "Bearer pq_live_sk_" + "a" * 32}
    )
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "SERVICE_UNAVAILABLE"
    assert response.headers["retry-after"] == "1"
