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


@pytest.mark.parametrize("degraded_client", [DEAD["postgres"]], ids=["postgres"], indirect=True)
def test_readyz_is_503_when_postgres_is_unreachable(degraded_client: TestClient) -> None:
    response = degraded_client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["error"]["code"] == "SERVICE_UNAVAILABLE"
    assert "postgres" in body["error"]["message"]
    assert body["degraded"] == ["postgres"]
    assert body["checks"]["redis"] == body["checks"]["s3"] == "ok"


@pytest.mark.parametrize(
    "degraded_client", [DEAD["redis"], DEAD["s3"]], ids=["redis", "s3"], indirect=True
)
def test_readyz_stays_ready_naming_a_degraded_redis_or_s3(
    degraded_client: TestClient, request: pytest.FixtureRequest
) -> None:
    # The replica still serves (rate limits fail open, reads come from cache): a load
    # balancer must keep it in.
    name = request.node.callspec.id
    response = degraded_client.get("/readyz")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "degraded"
    assert body["degraded"] == [name]
    assert body["checks"][name] != "ok"
    assert body["checks"]["postgres"] == "ok"


def test_readyz_is_503_while_draining(services: Services) -> None:
    from control_plane.app import create_app
    from control_plane.edge.health import start_draining

    app = create_app()
    with TestClient(app=app, raise_server_exceptions=False) as client:
        assert client.get("/readyz").json()["status"] == "ready"
        start_draining(app)
        response = client.get("/readyz")
        assert response.status_code == 503
        assert "draining" in response.json()["error"]["message"]
        assert client.get("/healthz").status_code == 200


@pytest.mark.parametrize("degraded_client", [DEAD["postgres"]], ids=["postgres"], indirect=True)
def test_api_call_while_postgres_is_down_is_503_not_500(degraded_client: TestClient) -> None:
    response = degraded_client.get(
        "/v1/keys", headers={"Authorization": "Bearer pq_live_sk_" + "a" * 32}
    )
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "SERVICE_UNAVAILABLE"
    assert response.headers["retry-after"] == "1"
