"""Makes the served OpenAPI document say what the server does: every error status a route can
answer, with the error envelope as its body, and ``additionalProperties: false`` on the request
schemas whose Structs refuse unknown fields.

Litestar documents only a ``400`` with its own body. :func:`document_errors` runs once at start-up,
before the document is first served, and rewrites the generated operations in place.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
from litestar import Litestar
from litestar._openapi.plugin import OpenAPIPlugin
from litestar.openapi.spec import (
    OpenAPI,
    OpenAPIMediaType,
    OpenAPIResponse,
    Operation,
    Reference,
    Schema,
)
from litestar.openapi.spec.enums import OpenAPIType

ERROR_SCHEMA = "ErrorBody"

DESCRIPTIONS: dict[int, str] = {
    400: "Malformed request: the body is not JSON (or not UTF-8, or nested too deeply)",
    401: "No valid credentials: the API key (or the session) is missing, invalid or revoked",
    403: "The key lacks the route's scope, or the CSRF token is missing",
    408: "The HTTP server closed a request whose head or body did not arrive in time",
    404: "The topic, group, member, key or other resource named in the path does not exist",
    409: "Conflicts with the current state (exists already, limit reached, stale lease, …)",
    413: "The request body or a message is larger than allowed",
    415: "The body is not declared `application/json` (`Content-Type`)",
    416: "The offset is outside the partition's retained range",
    422: "A field or parameter is invalid; `details` names each one",
    429: "Rate limit exceeded (or too many connections from one address); retry after "
    "`Retry-After` seconds",
    431: "The request head is over 64 KiB or 200 header fields (the HTTP server's own answer)",
    503: "A backing service is unreachable or the write's outcome is unknown; retry",
}

_MUTATING = frozenset({"post", "put", "patch", "delete"})


def error_body_schema() -> Schema:
    """The documented error body: ``{"error": {code, message, status, requestId, details?}}``."""
    detail = Schema(
        type=OpenAPIType.OBJECT,
        properties={
            "field": Schema(
                one_of=[Schema(type=OpenAPIType.STRING), Schema(type=OpenAPIType.NULL)]
            ),
            "message": Schema(type=OpenAPIType.STRING),
        },
        required=["message"],
    )
    error = Schema(
        type=OpenAPIType.OBJECT,
        properties={
            "code": Schema(type=OpenAPIType.STRING, examples=["VALIDATION_ERROR"]),
            "message": Schema(type=OpenAPIType.STRING),
            "status": Schema(type=OpenAPIType.INTEGER, minimum=400, maximum=599),
            "requestId": Schema(type=OpenAPIType.STRING, pattern=r"^req_[A-Za-z0-9]{8,64}$"),
            "details": Schema(type=OpenAPIType.ARRAY, items=detail),
        },
        required=["code", "message", "status", "requestId"],
    )
    return Schema(
        type=OpenAPIType.OBJECT,
        properties={"error": error},
        required=["error"],
        description="Every error: a stable code, a readable message, the status, the request id",
    )


def statuses_for(path: str, method: str, operation: Operation) -> list[int]:
    """The error statuses an operation can answer, from what every route shares."""
    statuses = {400, 408, 431}  # the HTTP server's own answers, on any request
    has_input = bool(operation.parameters) or operation.request_body is not None
    if has_input:
        statuses.add(422)
    if operation.request_body is not None:
        statuses |= {413, 415}
    if "{" in path or path.startswith("/v1/alerts/"):  # a named resource, or the one endpoint
        statuses.add(404)
    if path.startswith("/v1/"):
        statuses |= {401, 403, 429, 503}
        if method in _MUTATING:
            statuses.add(409)
    if path.startswith("/auth/"):
        statuses |= {401, 503}
        if method == "post":
            statuses |= {403, 422, 429}
    if "/partitions/" in path:
        statuses.add(416)
    if path == "/readyz":  # draining, or PostgreSQL unreachable
        statuses.add(503)
    return sorted(statuses)


def document_errors(app: Litestar) -> None:
    """Start-up hook: add the error responses and closed request schemas to the document."""
    openapi = app.plugins.get(OpenAPIPlugin).provide_openapi()
    assert openapi.components is not None
    schemas = openapi.components.schemas or {}
    schemas[ERROR_SCHEMA] = error_body_schema()
    openapi.components.schemas = schemas
    for path, method, operation in _operations(openapi):
        _add_error_responses(path, method, operation)
    _close_request_schemas(schemas)


def _operations(openapi: OpenAPI) -> Iterator[tuple[str, str, Operation]]:
    for path, item in (openapi.paths or {}).items():
        for method in ("get", "put", "post", "delete", "patch"):
            operation = getattr(item, method, None)
            if operation is not None:
                yield path, method, operation


def _add_error_responses(path: str, method: str, operation: Operation) -> None:
    responses = dict(operation.responses or {})
    reference = Reference(ref=f"#/components/schemas/{ERROR_SCHEMA}")
    for status in statuses_for(path, method, operation):
        responses[str(status)] = OpenAPIResponse(
            description=DESCRIPTIONS[status],
            content={"application/json": OpenAPIMediaType(schema=reference)},
        )
    operation.responses = responses


def _close_request_schemas(schemas: dict[str, Any]) -> None:
    """``additionalProperties: false`` where the Struct of the same name forbids unknown fields."""
    closed = {cls.__name__ for cls in _structs() if cls.__struct_config__.forbid_unknown_fields}
    for name, schema in schemas.items():
        if name in closed and isinstance(schema, Schema):
            schema.additional_properties = False


def _structs() -> Iterator[type[msgspec.Struct]]:
    pending: list[type[msgspec.Struct]] = [msgspec.Struct]
    while pending:
        cls = pending.pop()
        yield cls
        pending.extend(cls.__subclasses__())
