"""Key authentication for a busy API process: a short-lived cache and batched last-used times.

A key's context is cached for :data:`CACHE_TTL_S`, so a revocation is seen by every replica
within that time without a database read per request; concurrent requests with a key that is
not cached share one lookup instead of each taking a database connection. Last-used times are collected in memory
and written in one statement every few seconds, not on each request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from tenants import keys as key_format
from tenants.errors import InvalidApiKey
from tenants.models import AuthContext

CACHE_TTL_S = 2.0
MAX_CACHED_KEYS = 50_000

Lookup = Callable[[str], Awaitable[AuthContext]]


class KeyAuthenticator:
    """Resolves presented keys to their :class:`AuthContext`, caching hits briefly."""

    def __init__(self, lookup: Lookup, ttl_s: float = CACHE_TTL_S) -> None:
        self._lookup = lookup
        self._ttl_s = ttl_s
        self._cache: dict[bytes, tuple[float, AuthContext]] = {}
        self._loading: dict[bytes, asyncio.Future[AuthContext]] = {}
        self._used: dict[str, datetime] = {}

    async def authenticate(self, presented: str | None) -> AuthContext:
        """The caller's context, or :class:`InvalidApiKey`."""
        if not presented or not key_format.is_well_formed(presented):
            raise InvalidApiKey
        digest = key_format.key_hash(presented)
        now = time.monotonic()
        cached = self._cache.get(digest)
        if cached is None or cached[0] <= now:
            context = await self._load(digest, presented, now)
        else:
            context = cached[1]
        if context.expires_at is not None and context.expires_at <= datetime.now(UTC):
            raise InvalidApiKey
        self._used[context.key_id] = datetime.now(UTC)
        return context

    async def _load(self, digest: bytes, presented: str, now: float) -> AuthContext:
        """Look the key up once for every request waiting for it."""
        loading = self._loading.get(digest)
        if loading is None:
            loading = asyncio.ensure_future(self._lookup(presented))
            self._loading[digest] = loading
            loading.add_done_callback(lambda done: self._loaded(digest, now, done))
        # Shielded: a waiter that gives up does not cancel the lookup of the others.
        return await asyncio.shield(loading)

    def _loaded(self, digest: bytes, now: float, done: asyncio.Future[AuthContext]) -> None:
        self._loading.pop(digest, None)
        if not done.cancelled() and done.exception() is None:
            self._remember(digest, now, done.result())

    def _remember(self, digest: bytes, now: float, context: AuthContext) -> None:
        if len(self._cache) >= MAX_CACHED_KEYS:
            self._cache.clear()
        self._cache[digest] = (now + self._ttl_s, context)

    def take_used(self) -> dict[str, datetime]:
        """Last-used times gathered since the previous call."""
        used, self._used = self._used, {}
        return used
