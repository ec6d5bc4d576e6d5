"""The served OpenAPI document is the API: error statuses with the error envelope (the HTTP
server's own 408 and 431 included), request schemas and parameters with every rule the server
enforces (exact integer bounds, patterns inside unions and containers, durations, names), the
stream as Server-Sent Events, and ``OPTIONS`` allowing exactly the documented methods."""

from __future__ import annotations

import re
from typing import Any

import pytest
from litestar.testing import TestClient

from data_plane.topics.service import NAME_PATTERN
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation

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
    assert schemas["CreateTopicRequest"]["properties"]["name"]["pattern"] == NAME_PATTERN
    assert schemas["SeekRequest"]["properties"]["offset"]["minimum"] == 0
    assert schemas["SeekRequest"]["properties"]["offset"]["maximum"] >= 2**63 - 1024
    assert schemas["CreateKeyRequest"]["properties"]["name"]["maxLength"] == 100


SAMPLES = {"topic": "orders", "group": "workers", "partition": "0", "number": "INV-1"}


def test_options_allows_exactly_the_documented_methods(
    client: TestClient, document: dict[str, Any]
) -> None:
    wrong = {}
    for path, item in document["paths"].items():
        documented = {m.upper() for m in item if m in {"get", "post", "put", "patch", "delete"}}
        concrete = re.sub(r"\{(\w+)\}", lambda m: SAMPLES.get(m.group(1), "x1"), path)
        response = client.options(concrete)
        allowed = {m.strip() for m in response.headers.get("allow", "").split(",") if m.strip()}
        if response.status_code != 204 or allowed - {"OPTIONS", "HEAD"} != documented:
            wrong[path] = (response.status_code, sorted(allowed), sorted(documented))
    assert not wrong, wrong


def test_the_rules_litestar_loses_are_in_the_document(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    no_nul = r"^[^\x00]*$"
    assert schemas["AckRequest"]["properties"]["ackIds"]["items"]["pattern"] == no_nul
    headers = schemas["PublishRequest"]["properties"]["headers"]["anyOf"][0]
    assert (
        headers["propertyNames"]["pattern"] == headers["additionalProperties"]["pattern"] == no_nul
    )
    [_, offset] = schemas["ResetRequest"]["properties"]["to"]["anyOf"]
    assert (offset["minimum"], offset["maximum"]) == (0, 2**63 - 1)
    topic = schemas["CreateTopicRequest"]["properties"]
    assert (topic["partitions"]["minimum"], topic["partitions"]["maximum"]) == (1, 4096)
    assert re.fullmatch(topic["retention"]["pattern"], "30d")
    assert not re.fullmatch(topic["retention"]["pattern"], "0d")
    seconds = schemas["ExtendRequest"]["properties"]["seconds"]
    assert (seconds["minimum"], seconds["maximum"]) == (1, 43_200)


@pytest.mark.parametrize(
    ("value", "valid"),
    [("30s", True), ("1000ms", True), ("12h", True), ("720m", True), ("13h", False),
     ("999ms", False), ("5 s", False), ("1d", False), ("030s", True)],
)  # fmt: skip
def test_durations_are_documented_with_their_bounds(
    document: dict[str, Any], value: str, valid: bool
) -> None:
    ack = document["components"]["schemas"]["GroupConfigRequest"]["properties"]["ackTimeout"]
    assert (ack["minimum"], ack["maximum"]) == (1_000, 43_200_000)  # as milliseconds
    assert bool(re.fullmatch(ack["pattern"], value)) is valid


def test_parameters_carry_their_rules(document: dict[str, Any]) -> None:
    def schema(path: str, name: str) -> dict[str, Any]:
        parameters = document["paths"][path]["get"]["parameters"]
        return dict(next(p for p in parameters if p["name"] == name)["schema"])

    browse = "/v1/topics/{topic}/partitions/{partition}/messages"
    assert schema(browse, "offset") == {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}
    assert schema(browse, "topic")["pattern"] == NAME_PATTERN
    assert schema("/v1/usage", "granularity")["enum"] == ["hour", "day"]
    lag = "/v1/topics/{topic}/groups/{group}/lag"
    assert schema(lag, "until") == {"type": "string", "format": "date-time"} | {
        k: v for k, v in schema(lag, "until").items() if k == "description"
    }


def test_no_bound_is_a_rounded_float(document: dict[str, Any]) -> None:
    floats: list[tuple[str, Any]] = []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("minimum", "maximum") and isinstance(value, float):
                    floats.append((where, value))
                walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{where}/{index}")

    walk(document, "")
    assert floats == []


def test_the_stream_and_the_http_servers_own_answers_are_documented(
    document: dict[str, Any],
) -> None:
    stream = document["paths"]["/v1/topics/{topic}/groups/{group}/members/{member_id}/stream"]
    assert set(stream["get"]["responses"]["200"]["content"]) == {"text/event-stream"}
    for path, method, operation in operations(document):
        assert {"400", "408", "431"} <= set(operation["responses"]), (method, path)
        if "requestBody" in operation:
            assert "415" in operation["responses"], (method, path)


def test_a_lag_window_given_as_a_number_is_refused(client: TestClient, services: Services) -> None:
    """``until=0.5`` is not a date-time, whatever a lenient parser makes of it."""
    key = new_organisation(services.database_url).keys["production"].secret
    for value in ("0.5", "1700000000"):
        response = client.get(
            "/v1/topics/t/groups/g/lag", params={"until": value}, headers=bearer(key)
        )
        assert response.status_code == 422, response.text
        assert response.json()["error"]["details"][0]["field"] == "until"
