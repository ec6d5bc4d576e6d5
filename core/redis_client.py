"""The one way QueueCore builds a Redis client (rate limits, login throttling, tier updates, the
dev stack's readiness probe): asyncio, every wait bounded, so a frozen Redis fails a call fast
instead of holding it (the callers fail open, see :mod:`core.redis_outage`). Celery reaches the
broker through its own transport, configured in :mod:`core.worker`."""

from __future__ import annotations

from redis.asyncio import Redis

TIMEOUT_S = 2.0


def redis_client(url: str, timeout_s: float = TIMEOUT_S) -> Redis:
    """A client for ``url`` (``redis://``, ``rediss://`` or ``unix://``); connects on first use."""
    return Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)


async def ping(url: str, timeout_s: float = TIMEOUT_S) -> bool:
    """Whether the server at ``url`` answers a PING."""
    client = redis_client(url, timeout_s)
    try:
        return bool(await client.ping())
    finally:
        await client.aclose()
