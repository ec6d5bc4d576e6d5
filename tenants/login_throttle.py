"""Login throttling: failed dashboard sign-ins counted per account and per client address.

Each count is a sliding log in Redis (a sorted set of attempt times), shared by every API replica.
An attempt is counted *before* its password is checked, so parallel guesses cannot overtake the
count and a refused attempt costs no argon2 work; a success takes its own attempt back and forgets
the account's failures, and an attempt that ends for another reason (the database is down) is
taken back too. Accounts are keyed by the SHA-256 of the normalised email, so Redis holds no
addresses, and unknown emails are counted exactly like known ones. When Redis is unreachable each
process counts in memory instead (docs/decisions.md §9).
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import math
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.exceptions import RedisError

from core.errors import ClientError
from core.redis_outage import RedisOutage
from observability.logging import get_logger
from tenants.errors import InvalidCredentials

log = get_logger("queuecore.login_throttle")

MAX_FAILURES_PER_ACCOUNT = 5
MAX_FAILURES_PER_ADDRESS = 20
FAILURE_WINDOW_S = 15 * 60
# One hash tag for every key, so the script's two keys share a slot should Redis be a cluster.
KEY_PREFIX = "qc:login:{throttle}"
# A subscriber usually gets a whole IPv6 /64: counting single addresses there would count nothing.
IPV6_PREFIX_BITS = 64
MAX_ADDRESS_CHARS = 64
# While Redis is failing, attempts skip it for this long instead of each waiting on a timeout.
REDIS_TIMEOUT_S = 0.5
REDIS_RETRY_S = 5.0
MAX_LOCAL_LOGS = 100_000

# The script's KEYS, ARGV and reply are described at the top of its file.
ADMIT_LUA = (
    resources.files("tenants").joinpath("lua", "login_admit.lua").read_text(encoding="utf-8")
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ThrottlePolicy:
    """How many failed sign-ins an account and a client address may have in one window."""

    max_failures_per_account: int = MAX_FAILURES_PER_ACCOUNT
    max_failures_per_address: int = MAX_FAILURES_PER_ADDRESS
    window_ms: int = FAILURE_WINDOW_S * 1000

    def __post_init__(self) -> None:
        if min(self.max_failures_per_account, self.max_failures_per_address, self.window_ms) < 1:
            raise ValueError("login throttle limits and window must be at least 1")


class TooManyLoginAttempts(ClientError):
    """Too many recent failed sign-ins for this account or from this address.

    Same code as the API's rate limits, hence 429 with ``Retry-After``. One answer whichever limit
    was reached and whether or not the account exists.
    """

    code = "RATE_LIMIT_EXCEEDED"

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(
            f"Too many failed sign-in attempts. Retry after {retry_after_s} s.",
            retry_after_s=retry_after_s,
        )


def normalise_email(email: str) -> str:
    """The form an email is counted under: stripped and lowercased, as the user lookup matches."""
    return email.strip().lower()


def account_digest(email: str) -> str:
    """SHA-256 (hex) of the normalised email: what Redis and the logs see instead of the address."""
    return hashlib.sha256(normalise_email(email).encode("utf-8")).hexdigest()


def address_bucket(host: str | None) -> str:
    """The client address counted: IPv4 as is, IPv6 by its /64, anything else cut short."""
    if not host:
        return "unknown"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host[:MAX_ADDRESS_CHARS]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/{IPV6_PREFIX_BITS}", strict=False))
    return str(address)


def _refused(email: str, client_address: str | None, wait_ms: int) -> TooManyLoginAttempts:
    retry_after_s = max(1, math.ceil(wait_ms / 1000))
    # The account as a digest prefix: enough to correlate log lines, never the address itself.
    log.info(
        "login_throttled",
        account=account_digest(email)[:16],
        client_address=address_bucket(client_address),
        retry_after_s=retry_after_s,
    )
    return TooManyLoginAttempts(retry_after_s)


@dataclass(frozen=True, slots=True)
class _Attempt:
    """One admitted attempt: where it was counted, and its member in both logs."""

    account_key: str
    address_key: str
    member: str
    in_redis: bool


class LocalAttempts:
    """The same sliding logs in this process's memory: the fallback while Redis is unreachable."""

    def __init__(self, window_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._window_s = window_ms / 1000
        self._clock = clock
        self._logs: dict[str, deque[tuple[float, str]]] = {}

    def admit(self, limits: Sequence[tuple[str, int]], member: str) -> int:
        """Count ``member`` in every log if each is under its limit; else ms until all have room."""
        now = self._clock()
        wait_s = max(self._wait_s(key, limit, now) for key, limit in limits)
        if wait_s > 0:
            return math.ceil(wait_s * 1000)
        for key, _ in limits:
            self._log(key).append((now, member))
        return 0

    def take_back(self, key: str, member: str) -> None:
        """Uncount one attempt."""
        entries = self._logs.get(key)
        if entries is not None:
            self._logs[key] = deque(entry for entry in entries if entry[1] != member)

    def forget(self, key: str) -> None:
        """Uncount every attempt of a log."""
        self._logs.pop(key, None)

    def _wait_s(self, key: str, limit: int, now: float) -> float:
        entries = self._logs.get(key)
        if not entries:
            return 0.0
        while entries and entries[0][0] <= now - self._window_s:
            entries.popleft()
        if len(entries) < limit:
            return 0.0
        return entries[len(entries) - limit][0] + self._window_s - now

    def _log(self, key: str) -> deque[tuple[float, str]]:
        entries = self._logs.get(key)
        if entries is None:
            if len(self._logs) >= MAX_LOCAL_LOGS:
                self._logs.clear()  # degraded mode: bounded memory beats exact accounting
            entries = self._logs[key] = deque()
        return entries


class LoginThrottle:
    """Counts sign-in attempts per account and per client address; Redis first, memory if it fails."""

    def __init__(
        self,
        redis: Redis,
        policy: ThrottlePolicy | None = None,
        *,
        key_prefix: str = KEY_PREFIX,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy or ThrottlePolicy()
        self._redis = redis
        self._admit_script = redis.register_script(ADMIT_LUA)
        self._key_prefix = key_prefix
        self._clock = clock
        self._local = LocalAttempts(self.policy.window_ms, clock)
        self._outage = RedisOutage(
            "login_throttle",
            "per-process in-memory counts",
            log,
            retry_s=REDIS_RETRY_S,
            clock=clock,
        )

    @asynccontextmanager
    async def attempt(self, email: str, client_address: str | None) -> AsyncIterator[None]:
        """Admit one attempt or raise :class:`TooManyLoginAttempts`; settle it when the block ends.

        :class:`InvalidCredentials` out of the block leaves the attempt counted as a failure;
        finishing normally forgets the account's failures; any other exception uncounts it.
        """
        attempt = await self._admit(email, client_address)
        try:
            yield
        except InvalidCredentials:
            raise
        except BaseException:
            await self._settle(attempt, succeeded=False)
            raise
        await self._settle(attempt, succeeded=True)

    async def admit(self, email: str, client_address: str | None) -> None:
        """Count one attempt that stays counted whatever its outcome (sign-ups), or raise
        :class:`TooManyLoginAttempts` when the account or the address is over its limit."""
        await self._admit(email, client_address)

    def account_key(self, email: str) -> str:
        """Redis key of an account's log."""
        return f"{self._key_prefix}:account:{account_digest(email)}"

    def address_key(self, client_address: str | None) -> str:
        """Redis key of a client address's log."""
        return f"{self._key_prefix}:address:{address_bucket(client_address)}"

    async def _admit(self, email: str, client_address: str | None) -> _Attempt:
        keys = (self.account_key(email), self.address_key(client_address))
        member = secrets.token_hex(8)
        wait_ms = await self._on_redis(lambda: self._admit_in_redis(keys, member))
        in_redis = wait_ms is not None
        if wait_ms is None:
            wait_ms = self._local.admit(list(zip(keys, self._limits(), strict=True)), member)
        if wait_ms > 0:
            raise _refused(email, client_address, wait_ms)
        return _Attempt(keys[0], keys[1], member, in_redis)

    def _limits(self) -> tuple[int, int]:
        return self.policy.max_failures_per_account, self.policy.max_failures_per_address

    async def _admit_in_redis(self, keys: tuple[str, str], member: str) -> int:
        args: list[int | str] = [self.policy.window_ms, *self._limits(), member]
        reply: Any = await self._admit_script(keys=list(keys), args=args)
        if not isinstance(reply, list) or len(reply) != 2:
            raise RedisError(f"unexpected reply from the login throttle script: {reply!r}")
        return 0 if int(reply[0]) == 1 else max(1, int(reply[1]))

    async def _settle(self, attempt: _Attempt, *, succeeded: bool) -> None:
        if succeeded:
            self._local.forget(attempt.account_key)
        else:
            self._local.take_back(attempt.account_key, attempt.member)
        self._local.take_back(attempt.address_key, attempt.member)
        if attempt.in_redis:
            await self._on_redis(lambda: self._settle_in_redis(attempt, succeeded))

    async def _settle_in_redis(self, attempt: _Attempt, succeeded: bool) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            if succeeded:
                pipe.delete(attempt.account_key)
            else:
                pipe.zrem(attempt.account_key, attempt.member)
            pipe.zrem(attempt.address_key, attempt.member)
            await pipe.execute()

    async def _on_redis(self, call: Callable[[], Awaitable[T]]) -> T | None:
        """``call()``'s result, or None when Redis failed (or failed moments ago and is skipped)."""
        if self._outage.skip():
            return None
        try:
            async with asyncio.timeout(REDIS_TIMEOUT_S):
                result = await call()
        except (RedisError, OSError) as exc:  # OSError covers TimeoutError and lost connections
            self._outage.failed(exc)
            return None
        self._outage.recovered()
        return result
