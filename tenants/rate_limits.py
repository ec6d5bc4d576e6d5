"""Per-key request rates: a sliding one-second window in Redis, shared by every API replica.

One Lua script reads the organisation's effective limits (kept in Redis, filled from PostgreSQL
on a miss) and counts requests in the sorted set of the key's requests of the last second,
atomically. A replica reserves slots in that window for the requests waiting on it and, when a
key is busy, for the ones it expects within :data:`LEASE_S`; it spends them locally, so a busy
key costs a few round trips a second instead of one per request (docs/decisions.md §5).
Changing a tier rewrites the limits in Redis (:func:`publish_limits`), so every replica applies
it from its next reservation. When Redis is unreachable each process falls back to the same
window in memory at the same limits.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from core.errors import ClientError
from core.redis_outage import RedisOutage
from observability.logging import get_logger
from tenants import service
from tenants.tiers import CATEGORIES, Category, Limits

log = get_logger("queuecore.rate_limit")

WINDOW_MS = 1000
KEY_PREFIX = "qc:rl"
# Safety net only: tier changes rewrite the limits at once; this bounds staleness if one did not.
LIMITS_TTL_S = 30
# While Redis is failing, requests skip it for this long instead of each waiting on a timeout.
REDIS_RETRY_S = 5.0
REDIS_TIMEOUT_S = 0.5
LOCAL_LIMITS_TTL_S = 2.0
MAX_LOCAL_BUCKETS = 100_000

# A replica spends the slots it reserved ahead within this long; unspent ones are dropped.
LEASE_S = 0.1
# It reserves ahead at most this share of a key's limit (so small limits are never reserved
# ahead, and a replica can strand at most 1/20 of a busy key's budget for a second).
PREFETCH_SHARE = 20
MAX_RESERVE = 1000  # slots per reservation (the script adds them 200 per ZADD)

# The script's KEYS, ARGV and reply are described at the top of its file.
SLIDING_WINDOW_LUA = (
    resources.files("tenants").joinpath("lua", "sliding_window.lua").read_text(encoding="utf-8")
)

LimitsLoader = Callable[[str], Awaitable[Limits]]


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of counting one request against its key's budget."""

    allowed: bool
    limit: int
    remaining: int
    reset_ms: int

    @property
    def retry_after_s(self) -> int:
        """Whole seconds until the window has room again (at least 1)."""
        return max(1, math.ceil(self.reset_ms / 1000))

    def headers(self) -> dict[str, str]:
        """``X-RateLimit-*``; Reset is seconds until the oldest counted request leaves the window."""
        return {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(self.remaining),
            "X-RateLimit-Reset": str(self.retry_after_s),
        }


class RateLimitExceeded(ClientError):
    """The key used up its budget for this category in the last second."""

    code = "RATE_LIMIT_EXCEEDED"

    def __init__(self, category: str, decision: Decision) -> None:
        super().__init__(
            f"You have exceeded your plan's rate limit of {decision.limit} {category} requests "
            f"per second for this API key. Retry after {decision.retry_after_s} s.",
            category=category,
            limit=decision.limit,
            retry_after_s=decision.retry_after_s,
            headers=decision.headers(),
        )


def limits_key(organisation_id: str) -> str:
    """Redis key of an organisation's rates (hash-tagged so one script may touch both keys).

    Versioned by the number of categories: a replica that knows fewer keeps its own key."""
    return f"{KEY_PREFIX}:{{{organisation_id}}}:limits:{len(CATEGORIES)}"


def window_key(organisation_id: str, key_id: str, category: str) -> str:
    """Redis key of the sorted set of one API key's requests in one category."""
    return f"{KEY_PREFIX}:{{{organisation_id}}}:{key_id}:{category}"


def encode_limits(limits: Limits) -> str:
    """The rates as the Lua script reads them, in :data:`CATEGORIES` order."""
    return " ".join(str(limits.rate(category)) for category in CATEGORIES)


async def organisation_limits(conn: service.Conn, organisation_id: str) -> Limits:
    """The effective limits of an organisation, from PostgreSQL."""
    return (await service.get_organisation(conn, organisation_id)).limits


async def publish_limits(redis: Redis, organisation_id: str, limits: Limits) -> None:
    """Make these the limits every replica applies to the organisation from its next request.

    Call it after the transaction that changed the tier has committed.
    """
    await redis.set(limits_key(organisation_id), encode_limits(limits), ex=LIMITS_TTL_S)


class LocalWindow:
    """The same sliding window in this process's memory: the fallback when Redis is down."""

    def __init__(self, window_ms: int = WINDOW_MS, clock: Callable[[], float] = time.monotonic):
        self._window_s = window_ms / 1000
        self._clock = clock
        self._buckets: dict[str, deque[float]] = {}

    def hit(self, bucket: str, limit: int) -> Decision:
        """Count one request in ``bucket`` if it fits under ``limit``."""
        now = self._clock()
        times = self._bucket(bucket)
        while times and times[0] <= now - self._window_s:
            times.popleft()
        allowed = len(times) < limit
        if allowed:
            times.append(now)
        reset_s = times[0] + self._window_s - now if times else self._window_s
        return Decision(allowed, limit, max(limit - len(times), 0), math.ceil(reset_s * 1000))

    def _bucket(self, bucket: str) -> deque[float]:
        times = self._buckets.get(bucket)
        if times is None:
            if len(self._buckets) >= MAX_LOCAL_BUCKETS:
                self._buckets.clear()  # degraded mode: bounded memory beats exact accounting
            times = self._buckets[bucket] = deque()
        return times


class _RedisDown(Exception):
    """Redis did not answer the limiter in time; the cause is chained."""


@dataclass(eq=False, slots=True)
class _Reservation:
    """What one script call said about the window, besides the slots it granted."""

    limit: int
    remaining: int  # in Redis's window right after the grant
    reset_at: float  # clock time at which the oldest counted request leaves the window


@dataclass(eq=False, slots=True)
class _Bucket:
    """This replica's share of one key's window in one category."""

    slots: int = 0  # reserved in Redis, not spent yet
    spend_by: float = 0.0  # slots not spent by then are dropped
    last: _Reservation | None = None
    pending: asyncio.Future[_Reservation] | None = None  # the reservation in flight
    waiting: int = 0  # requests waiting for it
    hits: int = 0  # requests since the last reservation started
    since: float = 0.0  # when it started

    def take(self, now: float) -> Decision | None:
        """Spend a slot if one is left and fresh: the allowed decision."""
        last = self.last
        if self.slots <= 0 or now >= self.spend_by or last is None:
            return None
        self.slots -= 1
        return Decision(
            True, last.limit, last.remaining + self.slots, _ms_until(last.reset_at, now)
        )

    def wanted(self, now: float) -> int:
        """Slots to reserve: one per waiting request, plus the demand expected in LEASE_S."""
        rate = self.hits / (now - self.since) if now > self.since else 0.0
        share = self.last.limit // PREFETCH_SHARE if self.last is not None else 0
        ahead = min(share, int(rate * LEASE_S))
        self.hits, self.since = 0, now
        return min(self.waiting + (ahead if ahead >= 2 else 0), MAX_RESERVE)


class RateLimiter:
    """Counts requests per API key and category; Redis first, this process's memory if it fails."""

    def __init__(
        self,
        redis: Redis,
        load_limits: LimitsLoader,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._script = redis.register_script(SLIDING_WINDOW_LUA)
        self._load_limits = load_limits
        self._clock = clock
        self._local = LocalWindow(clock=clock)
        self._local_limits: dict[str, tuple[float, Limits]] = {}
        self._loading: dict[str, asyncio.Future[Limits]] = {}
        self._buckets: dict[tuple[str, str, Category], _Bucket] = {}
        self._outage = RedisOutage(
            "rate_limit", "per-process in-memory limits", log, retry_s=REDIS_RETRY_S, clock=clock
        )

    async def check(self, organisation_id: str, key_id: str, category: Category) -> Decision:
        """Count the request, or raise :class:`RateLimitExceeded` when over the limit."""
        decision = await self.hit(organisation_id, key_id, category)
        if not decision.allowed:
            raise RateLimitExceeded(category, decision)
        return decision

    async def hit(self, organisation_id: str, key_id: str, category: Category) -> Decision:
        """Count the request if it fits, and say whether it did."""
        bucket = self._bucket(organisation_id, key_id, category)
        bucket.hits += 1
        decision = bucket.take(self._clock())
        if decision is not None:
            return decision
        if not self._outage.skip():
            decision = await self._try_redis(bucket, organisation_id, key_id, category)
            if decision is not None:
                return decision
        return await self._hit_local(organisation_id, key_id, category)

    def _bucket(self, organisation_id: str, key_id: str, category: Category) -> _Bucket:
        bucket = self._buckets.get((organisation_id, key_id, category))
        if bucket is None:
            if len(self._buckets) >= MAX_LOCAL_BUCKETS:
                self._buckets = {k: b for k, b in self._buckets.items() if b.pending is not None}
            bucket = self._buckets[(organisation_id, key_id, category)] = _Bucket()
        return bucket

    async def _try_redis(
        self, bucket: _Bucket, organisation_id: str, key_id: str, category: Category
    ) -> Decision | None:
        try:
            decision = await self._wait_for_slot(bucket, organisation_id, key_id, category)
        except _RedisDown as exc:
            self._outage.failed(exc.__cause__ or exc)
            return None
        if self._outage.recovered():
            self._local_limits.clear()
        return decision

    async def _wait_for_slot(
        self, bucket: _Bucket, organisation_id: str, key_id: str, category: Category
    ) -> Decision:
        """Join the bucket's next reservation; a slot of it, or its refusal when it ran short.

        Requests that arrive while a reservation is in flight wait for the one after it, which
        reserves a slot for each of them: a burst costs a few script calls, not one each.
        """
        while True:
            if bucket.pending is None:
                bucket.pending = asyncio.ensure_future(
                    self._reserve(bucket, organisation_id, key_id, category)
                )
            pending = bucket.pending
            bucket.waiting += 1
            try:
                reservation = await asyncio.shield(pending)
            finally:
                bucket.waiting -= 1
            now = self._clock()
            decision = bucket.take(now)
            if decision is not None:
                return decision
            if reservation.remaining == 0:  # the window is full: refused, and not counted
                return Decision(False, reservation.limit, 0, _ms_until(reservation.reset_at, now))

    async def _reserve(
        self, bucket: _Bucket, organisation_id: str, key_id: str, category: Category
    ) -> _Reservation:
        try:
            await asyncio.sleep(0)  # requests arriving in this pass of the loop join it
            wanted = bucket.wanted(self._clock())
            keys = [limits_key(organisation_id), window_key(organisation_id, key_id, category)]
            reply = await self._eval(keys, category, "", wanted)
            if int(reply[0]) < 0:
                limits = await self._recent_limits(organisation_id)
                reply = await self._eval(keys, category, encode_limits(limits), wanted)
            granted, limit, remaining, reset_ms = (int(v) for v in reply)
            now = self._clock()
            reservation = _Reservation(limit, remaining, now + reset_ms / 1000)
            bucket.slots, bucket.spend_by, bucket.last = granted, now + LEASE_S, reservation
            return reservation
        finally:
            bucket.pending = None

    async def _eval(
        self, keys: list[str], category: Category, limits: str, wanted: int
    ) -> list[Any]:
        index = CATEGORIES.index(category) + 1
        args: list[str | int] = [
            index,
            WINDOW_MS,
            secrets.token_hex(6),
            limits,
            LIMITS_TTL_S,
            wanted,
        ]
        try:
            async with asyncio.timeout(REDIS_TIMEOUT_S):
                reply = await self._script(keys=keys, args=args)
        except (RedisError, OSError) as exc:  # OSError covers TimeoutError and lost connections
            raise _RedisDown from exc
        if not isinstance(reply, list) or len(reply) != 4:
            raise _RedisDown from RedisError(f"unexpected reply from the limiter script: {reply!r}")
        return reply

    async def _hit_local(self, organisation_id: str, key_id: str, category: Category) -> Decision:
        limits = await self._recent_limits(organisation_id)
        return self._local.hit(f"{key_id}:{category}", limits.rate(category))

    async def _recent_limits(self, organisation_id: str) -> Limits:
        # Without Redis, a tier change reaches this process within LOCAL_LIMITS_TTL_S. With Redis,
        # these only fill its missing limits key: a tier change writes that key itself.
        cached = self._local_limits.get(organisation_id)
        if cached is not None and cached[0] > self._clock():
            return cached[1]
        # A burst on a cold organisation makes one PostgreSQL query, not one per request: the
        # stampede of loads kept the event loop so busy that Redis calls timed out.
        loading = self._loading.get(organisation_id)
        if loading is None:
            loading = asyncio.ensure_future(self._load_and_keep(organisation_id))
            self._loading[organisation_id] = loading
            loading.add_done_callback(lambda _: self._loading.pop(organisation_id, None))
        return await asyncio.shield(loading)

    async def _load_and_keep(self, organisation_id: str) -> Limits:
        # Kept before the load completes, so no request sees it neither loading nor kept.
        limits = await self._load_limits(organisation_id)
        if len(self._local_limits) >= MAX_LOCAL_BUCKETS:
            self._local_limits.clear()
        self._local_limits[organisation_id] = (self._clock() + LOCAL_LIMITS_TTL_S, limits)
        return limits


def _ms_until(moment: float, now: float) -> int:
    return max(math.ceil((moment - now) * 1000), 0)
