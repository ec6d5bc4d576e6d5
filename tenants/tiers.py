"""Tiers: request rates per category and the quotas that topics and publishing enforce."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from core.errors import ValidationFailed

TierName = Literal["developer", "pro", "enterprise"]
Category = Literal["publish", "consume", "admin", "lease"]
TIERS: tuple[TierName, ...] = ("developer", "pro", "enterprise")
# "lease" counts heartbeats and lease extensions apart from the consume budget meant for data
# (pulls, acks, nacks), at the same rate: keeping a member and its leases alive never competes
# with consuming (docs/consumer-groups.md, "A consumer's budget").
CATEGORIES: tuple[Category, ...] = ("publish", "consume", "admin", "lease")


class Limits(msgspec.Struct, frozen=True, rename="camel"):
    """Per-key request rates (per second) and per-environment quotas of one organisation; also
    its wire shape (``billing.schemas.TierLimits`` is this)."""

    publish_per_s: int
    consume_per_s: int
    admin_per_s: int
    max_topics: int
    max_partitions: int
    max_retention_s: int
    max_message_bytes: int
    max_batch_messages: int

    def rate(self, category: Category) -> int:
        """Requests per second allowed in ``category``."""
        return int(getattr(self, f"{'consume' if category == 'lease' else category}_per_s"))

    def as_dict(self) -> dict[str, int]:
        """Plain values, for storage and display."""
        return msgspec.structs.asdict(self)


_DAY = 86_400
MAX_WEIGHT = 100
_WEIGHT_UNIT = 100  # publish requests a second that count as weight 1 (the Developer tier)

TIER_LIMITS: dict[TierName, Limits] = {
    "developer": Limits(
        100,
        50,
        10,
        max_topics=10,
        max_partitions=16,
        max_retention_s=7 * _DAY,
        max_message_bytes=256 * 1024,
        max_batch_messages=1000,
    ),
    "pro": Limits(
        1000,
        500,
        50,
        max_topics=200,
        max_partitions=64,
        max_retention_s=30 * _DAY,
        max_message_bytes=1024 * 1024,
        max_batch_messages=1000,
    ),
    # Enterprise starts from Pro; its organisation's ``custom_limits`` override any field.
    "enterprise": Limits(
        1000,
        500,
        50,
        max_topics=1000,
        max_partitions=256,
        max_retention_s=365 * _DAY,
        max_message_bytes=1024 * 1024,
        max_batch_messages=1000,
    ),
}


def limits_for(tier: str, custom: dict[str, Any] | None) -> Limits:
    """The effective limits: the tier's, with an Enterprise organisation's custom values on top."""
    base = TIER_LIMITS[tier]  # type: ignore[index]
    if tier != "enterprise" or not custom:
        return base
    return msgspec.structs.replace(base, **validate_custom_limits(custom))


def validate_custom_limits(custom: dict[str, Any]) -> dict[str, int]:
    """Only known fields, positive integers."""
    known = set(TIER_LIMITS["developer"].as_dict())
    clean: dict[str, int] = {}
    for name, value in custom.items():
        if name not in known:
            raise ValidationFailed(
                f"unknown limit '{name}'; known: {', '.join(sorted(known))}", field=name
            )
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValidationFailed(f"limit '{name}' must be a positive integer", field=name)
        clean[name] = value
    return clean


def tier_weight(publish_per_s: int) -> int:
    """An organisation's share of a replica under contention: its publish rate in units of the
    Developer tier's (Developer 1, Pro 10), at most :data:`MAX_WEIGHT`."""
    return max(1, min(MAX_WEIGHT, publish_per_s // _WEIGHT_UNIT))
