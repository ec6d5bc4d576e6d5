"""Wire shapes of usage (``GET /v1/usage``): msgspec Structs, camelCase JSON."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec

from tenants.tiers import Limits

Granularity = Literal["hour", "day"]


class RequestCounts(msgspec.Struct, rename="camel"):
    """Authenticated ``/v1`` requests by rate-limit category."""

    publish: int
    consume: int
    admin: int
    total: int


class UsageAmounts(msgspec.Struct, rename="camel"):
    """Usage over a span of time: messages and payload bytes in and out, requests, storage.

    ``storageByteHours`` adds each hour's average stored bytes (so for one hour it is that
    hour's average); ``storageBytesMax`` is the largest sample.
    """

    messages_in: int
    bytes_in: int
    messages_out: int
    bytes_out: int
    requests: RequestCounts
    storage_byte_hours: float
    storage_bytes_max: int


class UsageBucket(UsageAmounts, rename="camel", kw_only=True):
    """One UTC hour or day of usage, starting at ``start``."""

    start: datetime


class TierLimits(Limits, frozen=True):
    """The organisation's effective limits, for context: ``tenants.tiers.Limits`` by the name
    the usage report has always given them."""


class TierView(msgspec.Struct, rename="camel"):
    """The organisation's tier and its limits."""

    name: str
    limits: TierLimits


class UsageReport(msgspec.Struct, rename="camel", kw_only=True):
    """``GET /v1/usage``: one environment's usage in ``[from, to)``, per bucket and in total.

    Every bucket of the window is listed, zeros included, oldest first.
    """

    environment_id: str
    environment: str
    project_id: str
    from_: datetime = msgspec.field(name="from")
    to: datetime
    granularity: Granularity
    buckets: list[UsageBucket]
    totals: UsageAmounts
    tier: TierView
