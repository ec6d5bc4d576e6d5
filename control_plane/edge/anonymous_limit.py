"""Rate limiting of ``/v1`` requests that carry no API key: per client address, in the same
shared Redis window as keyed requests (per-process memory while Redis is down).

They are all refused (401), but each still costs a route match and an answer: a client address
gets :data:`control_plane.edge.rate_limit.ANONYMOUS_PER_S` of them a second, then ``429 RATE_LIMIT_EXCEEDED`` with
``Retry-After``.
"""

from __future__ import annotations

from litestar.types import Scope

from control_plane.edge.rate_limit import ANONYMOUS_ORGANISATION, limiter_of
from core.errors import ClientError
from tenants.login_throttle import address_bucket
from tenants.rate_limits import Decision
from tenants.tiers import Category

ANONYMOUS_CATEGORY: Category = "admin"  # the limits' admin rate is the anonymous rate


class AnonymousRateLimitExceeded(ClientError):
    """A client address sent too many requests without an API key in the last second."""

    code = "RATE_LIMIT_EXCEEDED"

    def __init__(self, decision: Decision) -> None:
        super().__init__(
            f"Too many requests without an API key from this address (limit {decision.limit} "
            f"per second). Retry after {decision.retry_after_s} s.",
            limit=decision.limit,
            retry_after_s=decision.retry_after_s,
            headers=decision.headers(),
        )


async def count_anonymous(scope: Scope) -> None:
    """Count a request without a bearer token against its client address; 429 over the rate."""
    client = scope.get("client")
    address = address_bucket(client[0] if client else None)
    decision = await limiter_of(scope["app"]).hit(
        ANONYMOUS_ORGANISATION, address, ANONYMOUS_CATEGORY
    )
    if not decision.allowed:
        raise AnonymousRateLimitExceeded(decision)
