"""``GET /v1/usage`` (admin scope), and the meter hooks of the delivery routes.

Publishes are metered by the publish service, requests by the rate-limit middleware, deliveries
(pull, stream, browse) here: all into the process's :class:`billing.meter.UsageMeter`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Annotated, Any

from litestar import Controller, Request, get
from litestar.params import QueryParameter

from billing import usage
from billing.schemas import UsageReport
from control_plane.auth import auth_context
from control_plane.resources import resources_of
from data_plane.write.segment import Message


def message_bytes(messages: Iterable[Message]) -> int:
    """Payload bytes as publishing counts them: data, key, header names and values (UTF-8)."""
    total = 0
    for message in messages:
        total += len(message.value)
        if message.key is not None:
            total += len(message.key)
        headers = message.headers
        if headers:  # UTF-8 length of the joined names and values: one encode each, not per item
            total += len("".join(headers).encode()) + len("".join(headers.values()).encode())
    return total


def meter_delivered(request: Request[Any, Any, Any], messages: list[Message]) -> None:
    """Count messages sent to the caller (egress) in its environment's usage."""
    if messages:
        resources_of(request.app).usage.meter.delivered(
            auth_context(request).environment_id, len(messages), message_bytes(messages)
        )


class UsageController(Controller):
    """The metered usage of the caller's environment."""

    path = "/usage"
    tags = ["usage"]
    opt = {"scope": "admin"}

    @get(
        "/",
        summary="Usage of this environment",
        description=(
            "Messages and payload bytes published (`messagesIn`, `bytesIn`) and delivered "
            "(`messagesOut`, `bytesOut`), requests by category and stored bytes "
            "(`storageByteHours`, `storageBytesMax`), per UTC `hour` or `day` of `[from, to)`, "
            "every bucket listed, and in total; with the organisation's tier and limits. "
            "Default window: the current calendar month. Counts reach the table within a few "
            "seconds (docs/billing.md)."
        ),
    )
    async def usage(
        self,
        request: Request[Any, Any, Any],
        from_: Annotated[
            str | None,
            QueryParameter(
                name="from",
                description="ISO 8601 date or time, UTC if no offset; default: start of month",
            ),
        ] = None,
        to: Annotated[
            str | None,
            QueryParameter(description="ISO 8601 date or time, exclusive; default: next month"),
        ] = None,
        granularity: Annotated[
            str | None, QueryParameter(description="`hour` or `day` (default)")
        ] = None,
    ) -> UsageReport:
        """422 ``VALIDATION_ERROR`` for a bad date, granularity or window."""
        window = usage.usage_window(from_, to, granularity, datetime.now(UTC))
        ctx = auth_context(request)
        environment = usage.MeteredEnvironment(
            ctx.environment_id, ctx.environment, ctx.project_id, ctx.organisation_id
        )
        async with resources_of(request.app).db.connection() as conn:
            return await usage.usage_report(conn, environment, window)
