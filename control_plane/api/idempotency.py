"""``GET /v1/topics/{topic}/messages/by-idempotency-key/{key}``: resolve an unknown publish outcome.

A publish answered ``503 PUBLISH_OUTCOME_UNKNOWN`` may have been stored. Its producer asks here
whether a message with its ``idempotencyKey`` was stored (200, where) or not (404), on topics of
either delivery kind, within the topic's retention (docs/faults.md).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, get
from litestar.di import NamedDependency
from litestar.params import PathParameter

from control_plane.edge.auth import auth_context
from data_plane.service import DataPlane, IdempotencyKey


class StoredMessage(msgspec.Struct, rename="camel"):
    """Where the message published with an idempotency key is stored."""

    idempotency_key: str
    message_id: str
    offset: int
    partition: int
    timestamp: str


class IdempotencyController(Controller):
    """Look up a published message by its idempotency key (publish scope)."""

    path = "/topics/{topic:str}/messages/by-idempotency-key/{key:str}"
    tags = ["publish"]
    opt = {"scope": "publish"}

    @get(
        "/",
        summary="Find the message published with an idempotency key",
        description=(
            "Resolves a publish answered `503 PUBLISH_OUTCOME_UNKNOWN`: 200 with the message's "
            "`messageId`, `partition` and `offset` when a message with this `idempotencyKey` is "
            "stored on the topic (within its retention), else 404 `IDEMPOTENCY_KEY_NOT_FOUND`, "
            "after which publishing again cannot store it twice. Works on both delivery kinds."
        ),
    )
    async def find(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        topic: Annotated[str, PathParameter()],
        key: Annotated[IdempotencyKey, PathParameter()],
    ) -> StoredMessage:
        """The stored message's place, or 404 ``IDEMPOTENCY_KEY_NOT_FOUND``."""
        stored = await data_plane.find_published(auth_context(request), topic, key)
        moment = datetime.fromtimestamp(stored.timestamp_ms / 1000, UTC)
        return StoredMessage(
            idempotency_key=key,
            message_id=stored.message_id,
            offset=stored.offset,
            partition=stored.partition,
            timestamp=moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        )
