"""Request bodies: JSON only when declared JSON and with unique keys; forms bounded before parsing.

A JSON endpoint reads its body only when ``Content-Type`` says JSON (``application/json`` or
``application/…+json``): anything else is 415 ``UNSUPPORTED_MEDIA_TYPE``, so a cross-site form
(which may send ``text/plain``) cannot sign a browser in or call the API. A JSON object with a
key twice is 400 ``VALIDATION_ERROR``: parsers disagree on which one counts. A route may read
its body in one pass with a reader of its own (:data:`BODY_READER`), held to the same rules.

A dashboard form is read only when urlencoded, at most :data:`FORM_MAX_BYTES` (sign-in and
sign-up: :data:`SIGN_IN_FORM_MAX_BYTES`) and :data:`FORM_MAX_FIELDS` fields, all checked before
anything is parsed (413 ``PAYLOAD_TOO_LARGE``), so a huge form cannot hold the event loop.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

import msgspec
from litestar import Request
from litestar.connection import ASGIConnection
from litestar.exceptions import ClientException, HTTPException

from core.errors import ClientError

FORM_TYPE = "application/x-www-form-urlencoded"
FORM_MAX_BYTES = 4 * 1024 * 1024  # a test message of the largest tier (1 MiB), percent-encoded
SIGN_IN_FORM_MAX_BYTES = 16 * 1024
FORM_MAX_FIELDS = 64  # the dashboard's largest form has 8
_FORM_STATE = "qc_form"
_CHECKED_STATE = "qc_json_keys_checked"
# A route's ``opt`` entry: a one-pass reader of its JSON body (bytes -> the handler's ``data``),
# None to go the general way. The reader holds the body to the same rules.
BODY_READER = "json_body_reader"


class PayloadTooLarge(ClientError):
    """A form over its size or field limit."""

    code = "PAYLOAD_TOO_LARGE"


class UnsupportedMediaType(ClientError):
    """A body whose ``Content-Type`` the endpoint does not read."""

    code = "UNSUPPORTED_MEDIA_TYPE"


def is_json(media_type: str) -> bool:
    """``application/json`` or a structured ``+json`` type."""
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )


class ApiRequest(Request[Any, Any, Any]):
    """The application's request: its JSON body is checked as the module says."""

    async def json(self) -> Any:
        """The decoded body; 415 unless declared JSON, 400 for a repeated key."""
        media_type = self.content_type[0]
        if not is_json(media_type):
            raise HTTPException(
                status_code=415,
                detail=f"Send the body as application/json, not {media_type or 'untyped'}",
            )
        reader = self.route_handler.opt.get(BODY_READER)
        if reader is not None and (read := reader(await self.body())) is not None:
            return read
        value = await super().json()
        state = self.scope.setdefault("state", {})
        if not state.get(_CHECKED_STATE):
            refuse_duplicate_keys(await self.body(), value)
            state[_CHECKED_STATE] = True
        return value


def refuse_duplicate_keys(body: bytes, value: Any) -> None:
    """Raise 400 when an object of ``body`` (decoded as ``value``) has a key twice."""
    key = repeated_key(body, value)
    if key is not None:
        raise ClientException(f"Request body has the key {key!r} twice")


def repeated_key(body: bytes, value: Any) -> str | None:
    """The first key an object of ``body`` (decoded as ``value``) has twice, or None.

    Decoding keeps the last of repeated keys, so re-encoding ``value`` gives the body back
    byte for byte, once whitespace is dropped, only when no key was repeated: that costs about a
    quarter of the decoding. A body written otherwise (escapes, number forms) is parsed again,
    exactly and more slowly, pair by pair.
    """
    if not isinstance(value, dict | list):
        return None
    try:
        encoded = msgspec.json.encode(value)
    except (TypeError, ValueError, OverflowError):
        encoded = None
    if encoded is not None and (encoded == body or encoded == msgspec.json.format(body, indent=-1)):
        return None
    try:
        json.loads(body, object_pairs_hook=_unique)
    except _Repeated as repeated:
        return repeated.key
    except ValueError:
        return None  # not Python's JSON (e.g. a number past its limits): msgspec's decoding stands
    return None


class _Repeated(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Repeated(key)
            seen.add(key)
    return found


async def read_form(
    connection: ASGIConnection[Any, Any, Any, Any], max_bytes: int = FORM_MAX_BYTES
) -> dict[str, list[str]]:
    """The fields of an urlencoded form body, checked before parsing (see the module)."""
    state = connection.scope.setdefault("state", {})
    if _FORM_STATE in state:
        return dict(state[_FORM_STATE])
    if not isinstance(connection, Request) or connection.content_type[0] != FORM_TYPE:
        raise UnsupportedMediaType(f"Forms are sent as {FORM_TYPE}")
    declared = connection.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLarge(f"A form is at most {max_bytes} bytes")
    body = bytearray()
    async for chunk in connection.stream():
        body += chunk
        if len(body) > max_bytes:
            raise PayloadTooLarge(f"A form is at most {max_bytes} bytes")
    if body.count(b"&") >= FORM_MAX_FIELDS:
        raise PayloadTooLarge(f"A form has at most {FORM_MAX_FIELDS} fields")
    text = body.decode("utf-8", errors="replace")
    fields = parse_qs(text, keep_blank_values=True, encoding="utf-8", errors="replace")
    state[_FORM_STATE] = fields
    return dict(fields)
