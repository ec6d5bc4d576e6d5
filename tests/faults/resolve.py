"""Resolving an unknown publish outcome through the server, where the server offers a way.

Kept apart so it is easy to adapt: when the API has a lookup of a message by idempotency key
(found in its OpenAPI document), an unknown answer on an exactly-once topic is resolved through it
before the client retries; otherwise the unknown stays in the history and the checker resolves it
from the final read.
"""

from __future__ import annotations

from typing import Any

import httpx

UNKNOWN_CODE_HINT = "UNKNOWN"  # an error code saying the outcome is unknown contains this


async def lookup_path(client: httpx.AsyncClient) -> str | None:
    """The path template of a lookup by idempotency key, if the API documents one."""
    try:
        response = await client.get("/schema/openapi.json")
        paths = response.json().get("paths", {})
    except (httpx.HTTPError, ValueError):
        return None
    for path, methods in paths.items():
        if "idempotency" in path.lower() and "get" in methods and "{topic}" in path:
            return str(path)
    return None


async def resolve(
    client: httpx.AsyncClient, template: str, topic: str, key: str
) -> dict[str, Any] | None:
    """``{"written": bool, "partition", "offset"}``, or None when the lookup itself failed."""
    last = template.rstrip("/").rsplit("/", 1)[-1]  # the key's placeholder, e.g. "{key}"
    path = template.replace("{topic}", topic).replace(last, key)
    try:
        response = await client.get(path)
    except httpx.HTTPError:
        return None
    if response.status_code == 404 and "TOPIC" not in response.text:
        return {"written": False}
    if response.status_code != 200:
        return None
    body = response.json()
    return {"written": True, "partition": body.get("partition"), "offset": body.get("offset")}


def says_unknown(body: Any) -> bool:
    """Whether an error body says the outcome is unknown (rather than 'nothing was written')."""
    try:
        code = str(body["error"]["code"])
    except (KeyError, TypeError):
        return False
    return UNKNOWN_CODE_HINT in code.upper()
