"""Authentication at the edge: 401s carry an RFC 6750 challenge, and requests without a key are
rate limited per client address."""

from __future__ import annotations

from litestar.testing import TestClient

from tests.support.tenancy import bearer


def test_a_401_without_a_key_carries_a_bearer_challenge(client: TestClient) -> None:
    response = client.get("/v1/topics")
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer realm="queuecore"'
    assert response.json()["error"]["code"] == "INVALID_API_KEY"


def test_a_401_for_a_bad_key_says_invalid_token(client: TestClient) -> None:
    response = client.get("/v1/topics", headers=bearer("pq_test_sk_" + "x" * 32))
    assert response.status_code == 401
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith('Bearer realm="queuecore", error="invalid_token"')


def test_a_401_of_the_session_api_carries_a_challenge(client: TestClient) -> None:
    response = client.get("/auth/session")
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith('Bearer realm="queuecore"')


def test_requests_without_a_key_are_rate_limited_per_address(client: TestClient) -> None:
    statuses = []
    for _ in range(400):
        response = client.get("/v1/topics")
        statuses.append(response.status_code)
        if response.status_code == 429:
            break
    assert statuses[-1] == 429, f"never limited: {set(statuses)}"
    assert set(statuses[:-1]) == {401}
    error = response.json()["error"]
    assert error["code"] == "RATE_LIMIT_EXCEEDED" and "without an API key" in error["message"]
    assert int(response.headers["retry-after"]) >= 1
