"""The served OpenAPI document is the API: error statuses with the error envelope, request
schemas with the limits the server enforces."""

from __future__ import annotations

from typing import Any

import pytest
from litestar.testing import TestClient

ENVELOPE = "#/components/schemas/ErrorBody"


@pytest.fixture(scope="module")
def document(client: TestClient) -> dict[str, Any]:
    response = client.get("/schema/openapi.json")
    assert response.status_code == 200
    return dict(response.json())


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in {"get", "post", "put", "patch", "delete"}
    ]


def test_every_error_response_is_the_envelope(document: dict[str, Any]) -> None:
    for path, method, operation in operations(document):
        for status, response in operation["responses"].items():
            if int(status) >= 400:
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": ENVELOPE}, (method, path, status)
    error = document["components"]["schemas"]["ErrorBody"]["properties"]["error"]
    assert set(error["required"]) == {"code", "message", "status", "requestId"}


def test_v1_routes_document_auth_scope_rate_limit_and_outage(document: dict[str, Any]) -> None:
    for path, method, operation in operations(document):
        if path.startswith("/v1/"):
            assert {"401", "403", "429", "503"} <= set(operation["responses"]), (method, path)
        if "{" in path:
            assert "404" in operation["responses"], (method, path)
        if "requestBody" in operation:
            assert {"413", "422"} <= set(operation["responses"]), (method, path)
    assert "409" in document["paths"]["/v1/topics"]["post"]["responses"]
    assert "401" in document["paths"]["/auth/login"]["post"]["responses"]


def test_readiness_documents_its_503_and_liveness_does_not(document: dict[str, Any]) -> None:
    """A balancer's probe reads 503 from /readyz while draining or without PostgreSQL."""
    assert "503" in document["paths"]["/readyz"]["get"]["responses"]
    assert "503" not in document["paths"]["/healthz"]["get"]["responses"]


def test_request_schemas_carry_the_enforced_limits(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    for name in ("CreateTopicRequest", "PublishRequest", "JoinRequest", "SeekRequest"):
        assert schemas[name]["additionalProperties"] is False, name
    assert "additionalProperties" not in schemas["TopicView"]  # responses stay open
    assert schemas["CreateTopicRequest"]["properties"]["name"]["pattern"] == r"^[^\x00]*$"
    assert schemas["SeekRequest"]["properties"]["offset"]["minimum"] == 0
    assert schemas["SeekRequest"]["properties"]["offset"]["maximum"] >= 2**63 - 1024
    assert schemas["CreateKeyRequest"]["properties"]["name"]["maxLength"] == 100
