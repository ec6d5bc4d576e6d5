"""Usage: the storage sampler and the report ``GET /v1/usage`` serves (docs/billing.md).

The request counters of ``usage_hourly`` come from the API processes' meters
(:mod:`billing.meter`); the storage columns from :func:`sample_storage`, a beat task every
:data:`STORAGE_SLOT_S`. :func:`usage_report` reads one environment's rows back, per UTC hour or
day, with every bucket of the window listed (zeros included) and the organisation's limits.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import msgspec

from billing import queries as q
from billing.schemas import (
    Granularity,
    RequestCounts,
    TierLimits,
    TierView,
    UsageAmounts,
    UsageBucket,
    UsageReport,
)
from core.db import Conn
from core.errors import ValidationFailed
from tenants import service as tenants

# One storage sample per slot; beat runs the sampler as often (infra.celery_app).
STORAGE_SLOT_S = 300
GRANULARITIES: dict[str, timedelta] = {"hour": timedelta(hours=1), "day": timedelta(days=1)}
# The longest window per granularity: a month of hours, a year of days.
MAX_BUCKETS: dict[str, int] = {"hour": 31 * 24, "day": 366}


@dataclass(frozen=True, slots=True)
class MeteredEnvironment:
    """The environment whose usage is asked for (the caller's, never another one)."""

    id: str
    name: str
    project_id: str
    organisation_id: str


@dataclass(frozen=True, slots=True)
class UsageWindow:
    """``[start, end)`` in whole buckets of ``granularity``, UTC."""

    start: datetime
    end: datetime
    granularity: Granularity

    @property
    def step(self) -> timedelta:
        """One bucket."""
        return GRANULARITIES[self.granularity]

    def starts(self) -> list[datetime]:
        """The start of every bucket, oldest first."""
        count = (self.end - self.start) // self.step
        return [self.start + i * self.step for i in range(count)]


# --- the storage sampler -----------------------------------------------------------------------


async def sample_storage(
    conn: Conn, at: datetime | None = None, environment_id: str | None = None
) -> int:
    """Add one sample of each environment's stored bytes (of ``environment_id`` only, if given)
    to the hour of ``at`` (now); environments sampled — 0 when this slot was sampled already."""
    slot = _slot(at or datetime.now(UTC))
    cursor = await conn.execute(q.SAMPLE_STORAGE, {"slot": slot, "environment_id": environment_id})
    return cursor.rowcount


def _slot(moment: datetime) -> datetime:
    epoch_s = int(moment.timestamp())
    return datetime.fromtimestamp(epoch_s - epoch_s % STORAGE_SLOT_S, UTC)


# --- the window of GET /v1/usage ---------------------------------------------------------------


def usage_window(
    from_text: str | None, to_text: str | None, granularity: str | None, now: datetime
) -> UsageWindow:
    """The window asked for: ``from`` and ``to`` are ISO 8601 dates or times (UTC when no
    offset is given), each defaulting to a bound of the current calendar month; ``from`` is
    rounded down and ``to`` up to whole buckets."""
    unit = "day" if granularity is None else granularity  # given empty, it is not a unit
    if unit not in GRANULARITIES:
        raise ValidationFailed("granularity must be 'hour' or 'day'", field="granularity")
    month_start, next_month = month_bounds(now)
    try:
        start = _floor(_moment(from_text, "from") or month_start, unit)
        end = _ceil(_moment(to_text, "to") or next_month, unit)
    except OverflowError:  # within a day of year 1 or 9999
        raise ValidationFailed("from and to must be within years 1 to 9999", field="from") from None
    if start >= end:
        raise ValidationFailed("from must be before to", field="from")
    if (end - start) // GRANULARITIES[unit] > MAX_BUCKETS[unit]:
        limit = "31 days" if unit == "hour" else "366 days"
        raise ValidationFailed(f"a window of {unit} buckets may span at most {limit}", field="to")
    return UsageWindow(start, end, cast(Granularity, unit))


def month_bounds(moment: datetime) -> tuple[datetime, datetime]:
    """The first instant of ``moment``'s UTC calendar month and of the next one."""
    first = moment.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    following = (first + timedelta(days=32)).replace(day=1)
    return first, following


def _moment(text: str | None, field: str) -> datetime | None:
    if text is None:
        return None
    value = _iso(text)
    if value is None:
        raise ValidationFailed(
            f"{field} must be an ISO 8601 date or time, got {text!r}", field=field
        )
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _iso(text: str) -> datetime | None:
    """``text`` parsed, also when a query string turned the offset's ``+`` into a space."""
    head, space, tail = text.rpartition(" ")
    for candidate in (text, f"{head}+{tail}" if space else None):
        if candidate is None:
            continue
        try:
            return datetime.fromisoformat(candidate)
        except ValueError:
            pass
        with contextlib.suppress(msgspec.ValidationError):  # RFC 3339's other spellings
            return msgspec.convert(candidate, datetime)
    return None


def _floor(moment: datetime, unit: str) -> datetime:
    moment = moment.replace(minute=0, second=0, microsecond=0)
    return moment.replace(hour=0) if unit == "day" else moment


def _ceil(moment: datetime, unit: str) -> datetime:
    floor = _floor(moment, unit)
    return floor if floor == moment else floor + GRANULARITIES[unit]


# --- the report --------------------------------------------------------------------------------


async def usage_report(
    conn: Conn, environment: MeteredEnvironment, window: UsageWindow
) -> UsageReport:
    """The environment's usage in the window, per bucket and in total, with its tier."""
    params = {
        "unit": window.granularity,
        "environment_id": environment.id,
        "from": window.start,
        "to": window.end,
    }
    rows = await (await conn.execute(q.SELECT_BUCKETS, params)).fetchall()
    organisation = await tenants.get_organisation(conn, environment.organisation_id)
    by_start = {row["start"]: row for row in rows}
    buckets = [_bucket(start, by_start.get(start)) for start in window.starts()]
    return UsageReport(
        environment_id=environment.id,
        environment=environment.name,
        project_id=environment.project_id,
        from_=window.start,
        to=window.end,
        granularity=window.granularity,
        buckets=buckets,
        totals=_totals(buckets),
        tier=TierView(organisation.tier, TierLimits(**organisation.limits.as_dict())),
    )


def _bucket(start: datetime, row: dict[str, Any] | None) -> UsageBucket:
    row = row or {}
    publish, consume, admin = (
        int(row.get(name) or 0)
        for name in ("publish_requests", "consume_requests", "admin_requests")
    )
    return UsageBucket(
        start=start,
        messages_in=int(row.get("messages_in") or 0),
        bytes_in=int(row.get("bytes_in") or 0),
        messages_out=int(row.get("messages_out") or 0),
        bytes_out=int(row.get("bytes_out") or 0),
        requests=RequestCounts(publish, consume, admin, publish + consume + admin),
        storage_byte_hours=float(row.get("storage_byte_hours") or 0.0),
        storage_bytes_max=int(row.get("storage_bytes_max") or 0),
    )


def _totals(buckets: list[UsageBucket]) -> UsageAmounts:
    def total(name: str) -> int:
        return sum(getattr(b.requests, name) for b in buckets)

    return UsageAmounts(
        messages_in=sum(b.messages_in for b in buckets),
        bytes_in=sum(b.bytes_in for b in buckets),
        messages_out=sum(b.messages_out for b in buckets),
        bytes_out=sum(b.bytes_out for b in buckets),
        requests=RequestCounts(total("publish"), total("consume"), total("admin"), total("total")),
        storage_byte_hours=sum(b.storage_byte_hours for b in buckets),
        storage_bytes_max=max((b.storage_bytes_max for b in buckets), default=0),
    )
