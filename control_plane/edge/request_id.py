"""Request ids: ``req_`` + 24 base62 characters, on every response and every log line."""

from __future__ import annotations

import re
import secrets
import string
from typing import Any

from litestar.types import ASGIApp, Message, Receive, Scope, Send

from observability.logging import bind, clear

HEADER = "X-Request-Id"
_HEADER_BYTES = HEADER.lower().encode()
_ALPHABET = string.ascii_letters + string.digits
_ID_CHARS = 24
_ID_BYTES = 17  # 2**136 < 62**24, so every value fits in 24 characters
_PAIRS = [high + low for high in _ALPHABET for low in _ALPHABET]
_ACCEPTED = re.compile(r"^req_[A-Za-z0-9]{8,64}$")


def new_request_id() -> str:
    """A fresh random request id."""
    # One urandom read per id (not one per character): 136 random bits as 24 base62 digits.
    value = int.from_bytes(secrets.token_bytes(_ID_BYTES))
    pairs = []
    for _ in range(_ID_CHARS // 2):  # two digits per step: ids are made for every request
        value, pair = divmod(value, 3844)
        pairs.append(_PAIRS[pair])
    return "req_" + "".join(pairs)


def request_id(scope: Scope | Any) -> str:
    """The request's id, created on first use (a well-formed incoming id is kept)."""
    state = scope.setdefault("state", {})
    rid = state.get("request_id")
    if rid is None:
        incoming = _incoming(scope)
        rid = incoming if incoming and _ACCEPTED.match(incoming) else new_request_id()
        state["request_id"] = rid
        bind(request_id=rid)
    return str(rid)


def _incoming(scope: Scope | Any) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"x-request-id":
            return bytes(value).decode("latin-1")
    return None


async def add_request_id_header(message: Message, scope: Scope) -> None:
    """``before_send`` hook: stamp the id on every response, errors and 404s included."""
    if message["type"] == "http.response.start":
        # Appended, not set through MutableScopeHeaders (a scan of every header per call):
        # nothing else in the application writes this header.
        header = (_HEADER_BYTES, request_id(scope).encode())
        message["headers"] = [*message.get("headers", ()), header]


def request_id_middleware(app: ASGIApp) -> ASGIApp:
    """Assign the id when a routed request starts, so every log line of its handler has it."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in {"http", "websocket"}:
            clear()
            # Bound again: the tracing hook may have made the id before this ``clear``.
            bind(request_id=request_id(scope))
        await app(scope, receive, send)

    return middleware
