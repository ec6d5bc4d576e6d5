"""Makes the served OpenAPI document carry every rule the server applies to a request's form, so
that a request valid by the document is never refused as invalid and one that breaks it is.

Litestar writes request schemas itself and loses constraints on the way: inside unions and
containers (``ackIds`` items without their pattern, header names, ``to`` without its minimum),
zero bounds (``offset`` without ``minimum: 0``) and 64-bit bounds as rounded floats. At start-up,
before the document is first served, :func:`document_rules`:

- replaces the schema of every request Struct by msgspec's own, which is exactly what the
  decoder checks, plus the service rules declared beside the fields (``extra_json_schema``:
  durations, topic names, retention, partitions; a Struct's ``schema_rules`` class variable for
  rules across its fields, such as one of two forms);
- gives the path and query parameters the rules their handlers apply (:data:`PARAMETERS`);
- writes integral bounds as exact integers;
- documents the push stream as ``text/event-stream``.
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
    Parameter,
    Reference,
    Schema,
)
from litestar.openapi.spec.enums import OpenAPIType

from core.wire_types import BIGINT_MAX, INTEGER_MAX
from data_plane.service import CONFIG_KEY_PATTERN, GROUP_NAME, MAX_NAME_LENGTH, NAME_PATTERN

MESSAGE_ID_PATTERN = r"^msg_[0-9A-Za-z]{20}$"
_COMPONENT = "#/components/schemas/"
# JSON Schema keyword -> Litestar Schema field, for the keywords msgspec writes.
_KEYWORDS = {
    "title": "title",
    "description": "description",
    "default": "default",
    "enum": "enum",
    "const": "const",
    "minimum": "minimum",
    "maximum": "maximum",
    "exclusiveMinimum": "exclusive_minimum",
    "exclusiveMaximum": "exclusive_maximum",
    "minLength": "min_length",
    "maxLength": "max_length",
    "pattern": "pattern",
    "format": "format",
    "minItems": "min_items",
    "maxItems": "max_items",
    "uniqueItems": "unique_items",
    "minProperties": "min_properties",
    "maxProperties": "max_properties",
    "required": "required",
    "multipleOf": "multiple_of",
}
_NESTED = {"items": "items", "propertyNames": "property_names"}
_LISTS = {"anyOf": "any_of", "oneOf": "one_of", "allOf": "all_of"}

PARAMETERS: dict[str, dict[str, Any]] = {
    "topic": {
        "type": "string",
        "pattern": NAME_PATTERN,
        "minLength": 1,
        "maxLength": MAX_NAME_LENGTH,
    },
    "group": {"type": "string", "pattern": GROUP_NAME.pattern},
    "partition": {"type": "integer", "minimum": 0, "maximum": INTEGER_MAX},
    "offset": {"type": "integer", "minimum": 0, "maximum": BIGINT_MAX},
    "granularity": {"type": "string", "enum": ["hour", "day"]},
    "from": {"type": "string", "anyOf": [{"format": "date"}, {"format": "date-time"}]},
    "to": {"type": "string", "anyOf": [{"format": "date"}, {"format": "date-time"}]},
    "since": {"type": "string", "format": "date-time"},
    "until": {"type": "string", "format": "date-time"},
    "after": {"type": "string", "pattern": MESSAGE_ID_PATTERN},
    "config_key": {"type": "string", "pattern": CONFIG_KEY_PATTERN},
}


def document_rules(app: Litestar) -> None:
    """Start-up hook: write the server's rules into the document (see the module)."""
    openapi = app.plugins.get(OpenAPIPlugin).provide_openapi()
    assert openapi.components is not None
    schemas = openapi.components.schemas or {}
    structs = list(_request_structs())
    rules = {s.__name__: s.schema_rules for s in structs if hasattr(s, "schema_rules")}
    for struct in structs:
        for name, definition in _msgspec_definitions(struct).items():
            converted = schema_of(definition | rules.get(name, {}))
            if name in schemas and isinstance(converted, Schema):
                schemas[name] = converted
    openapi.components.schemas = schemas
    for path, operation in _operations(openapi):
        _constrain_parameters(operation)
        if path.endswith("/stream"):
            _document_stream(operation)
    for schema in _all_schemas(openapi):
        _exact_bounds(schema)


def schema_of(definition: dict[str, Any]) -> Schema | Reference:
    """A JSON Schema dict (as msgspec writes it) as Litestar's OpenAPI objects."""
    if "$ref" in definition:
        return Reference(ref=_COMPONENT + definition["$ref"].rsplit("/", 1)[-1])
    fields: dict[str, Any] = {
        field: definition[keyword] for keyword, field in _KEYWORDS.items() if keyword in definition
    }
    if "type" in definition:
        fields["type"] = OpenAPIType(definition["type"])
    if "properties" in definition:
        fields["properties"] = {k: schema_of(v) for k, v in definition["properties"].items()}
    for keyword, field in _NESTED.items():
        if keyword in definition:
            fields[field] = schema_of(definition[keyword])
    for keyword, field in _LISTS.items():
        if keyword in definition:
            fields[field] = [schema_of(item) for item in definition[keyword]]
    extra = definition.get("additionalProperties")
    if extra is not None:
        fields["additional_properties"] = extra if isinstance(extra, bool) else schema_of(extra)
    return Schema(**fields)


def _request_structs() -> Iterator[type[msgspec.Struct]]:
    """Every Struct that refuses unknown fields: the request bodies."""
    pending: list[type[msgspec.Struct]] = [msgspec.Struct]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls is not msgspec.Struct and cls.__struct_config__.forbid_unknown_fields:
            yield cls


def _msgspec_definitions(struct: type[msgspec.Struct]) -> dict[str, dict[str, Any]]:
    definitions: dict[str, dict[str, Any]] = msgspec.json.schema(struct).get("$defs", {})
    return definitions


def _operations(openapi: OpenAPI) -> Iterator[tuple[str, Operation]]:
    for path, item in (openapi.paths or {}).items():
        for method in ("get", "put", "post", "delete", "patch"):
            operation = getattr(item, method, None)
            if operation is not None:
                yield path, operation


def _constrain_parameters(operation: Operation) -> None:
    for parameter in operation.parameters or []:
        if isinstance(parameter, Parameter) and parameter.name in PARAMETERS:
            rule = schema_of(PARAMETERS[parameter.name])
            current = parameter.schema
            if isinstance(current, Schema) and isinstance(rule, Schema):
                rule.description = current.description
                rule.default = current.default
            parameter.schema = rule


def _document_stream(operation: Operation) -> None:
    """The push stream answers Server-Sent Events, not JSON."""
    responses = dict(operation.responses or {})
    responses["200"] = OpenAPIResponse(
        description="Server-Sent Events: `message` events (one delivery each, its JSON in "
        "`data:` and its ackId in `id:`), `: keepalive` comments, and a last `error` event "
        "when the stream cannot go on",
        content={"text/event-stream": OpenAPIMediaType(schema=Schema(type=OpenAPIType.STRING))},
    )
    operation.responses = responses


def _all_schemas(openapi: OpenAPI) -> Iterator[Schema]:
    roots: list[Any] = (
        list((openapi.components.schemas or {}).values()) if openapi.components else []
    )
    for _, operation in _operations(openapi):
        roots += [p.schema for p in operation.parameters or [] if isinstance(p, Parameter)]
        body = operation.request_body
        if body is not None and not isinstance(body, Reference):
            roots += [media.schema for media in (body.content or {}).values()]
    yield from _walk(roots)


def _walk(roots: list[Any]) -> Iterator[Schema]:
    pending = list(roots)
    while pending:
        schema = pending.pop()
        if not isinstance(schema, Schema):
            continue
        yield schema
        pending += list((schema.properties or {}).values())
        pending += [*(schema.any_of or []), *(schema.one_of or []), *(schema.all_of or [])]
        pending += [schema.items, schema.property_names, schema.additional_properties]


def _exact_bounds(schema: Schema) -> None:
    """Integral bounds as integers; a bound past 2**53 is one of the 64-bit limits."""
    for field in ("minimum", "maximum"):
        value = getattr(schema, field)
        if isinstance(value, float) and value.is_integer():
            if abs(value) > 2**53:
                exact = BIGINT_MAX if value > 0 else -BIGINT_MAX - 1
            else:
                exact = int(value)
            setattr(schema, field, exact)
