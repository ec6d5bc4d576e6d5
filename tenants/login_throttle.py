"""Login throttling that slows guessing without locking the owner out (docs/decisions.md §9).

Failed sign-ins are counted three ways, each a sliding log in Redis (a sorted set of attempt
times) shared by every API replica:

- per account and client address: 5 in 15 minutes, then that address is refused for that account
  (one attacker cannot keep guessing one password, and cannot lock the owner out elsewhere);
- per client address: 20 in 15 minutes over all accounts (spraying one password from one place);
- per account: 100 in an hour from all addresses together (NIST SP 800-63B's cap on an account's
  failures), which refuses only addresses that have not signed in to the account in the last 30
  days: the owner's usual places keep working during a distributed attack.

An attempt is counted *before* its password is checked, so parallel guesses cannot overtake the
count and a refused attempt costs no argon2 work; a success takes its own attempt back, forgets the
failures of its account (and of its account and address) and remembers the address as known; an
attempt that ends for another reason (the database is down) is taken back. Accounts are keyed by
the SHA-256 of the normalised email, so Redis holds no addresses, and unknown emails are counted
exactly like known ones. When Redis is unreachable each process counts in memory instead.
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

MAX_FAILURES_PER_ACCOUNT_AND_ADDRESS = 5
MAX_FAILURES_PER_ADDRESS = 20
FAILURE_WINDOW_S = 15 * 60
MAX_FAILURES_PER_ACCOUNT = 100  # NIST SP 800-63B §5.2.2: at most 100 failures on an account
ACCOUNT_WINDOW_S = 3600
KNOWN_ADDRESS_S = 30 * 24 * 3600  # an address that signed in is exempt from the account's cap
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
    """How many failed sign-ins an account from one address, an address, and an account from
    unknown addresses may have, each in its window."""

    max_failures_per_account_and_address: int = MAX_FAILURES_PER_ACCOUNT_AND_ADDRESS
    max_failures_per_address: int = MAX_FAILURES_PER_ADDRESS
    window_ms: int = FAILURE_WINDOW_S * 1000  # of the two above
    max_failures_per_account: int = MAX_FAILURES_PER_ACCOUNT
    account_window_ms: int = ACCOUNT_WINDOW_S * 1000
    known_address_ms: int = KNOWN_ADDRESS_S * 1000

    def __post_init__(self) -> None:
        if min(*self.limits(), self.known_address_ms) < 1:
            raise ValueError("login throttle limits and windows must be at least 1")

    def limits(self) -> tuple[int, int, int, int, int, int]:
        """Limit and window (ms) of the account-and-address, address and account logs."""
        return (
            self.max_failures_per_account_and_address,
            self.window_ms,
            self.max_failures_per_address,
            self.window_ms,
            self.max_failures_per_account,
            self.account_window_ms,
        )


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
    """One admitted attempt: the logs it was counted in, its member there, the address marker."""

    logs: tuple[str, str, str]  # account and address, address, account
    known_key: str
    member: str
    in_redis: bool


class LocalAttempts:
    """The same sliding logs in this process's memory: the fallback while Redis is unreachable."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._logs: dict[str, deque[tuple[float, str]]] = {}
        self._known: dict[str, float] = {}  # marker -> until

    def admit(self, limits: Sequence[tuple[str, int, int]], member: str, known: str) -> int:
        """Count ``member`` in every log (key, limit, window ms) if each is under its limit (the
        last is not checked while ``known`` is marked); else ms until all have room."""
        now = self._clock()
        exempt = self._known.get(known, 0.0) > now
        checked = limits[:-1] if exempt else limits
        wait_s = max(
            self._wait_s(key, limit, window_ms / 1000, now) for key, limit, window_ms in checked
        )
        if wait_s > 0:
            return math.ceil(wait_s * 1000)
        for key, _, _ in limits:
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

    def mark(self, known: str, for_ms: int) -> None:
        """Remember an address as known to an account."""
        if len(self._known) >= MAX_LOCAL_LOGS:
            self._known.clear()
        self._known[known] = self._clock() + for_ms / 1000

    def _wait_s(self, key: str, limit: int, window_s: float, now: float) -> float:
        entries = self._logs.get(key)
        if not entries:
            return 0.0
        while entries and entries[0][0] <= now - window_s:
            entries.popleft()
        if len(entries) < limit:
            return 0.0
        return entries[len(entries) - limit][0] + window_s - now

    def _log(self, key: str) -> deque[tuple[float, str]]:
        entries = self._logs.get(key)
        if entries is None:
            if len(self._logs) >= MAX_LOCAL_LOGS:
                self._logs.clear()  # degraded mode: bounded memory beats exact accounting
            entries = self._logs[key] = deque()
        return entries


class LoginThrottle:
    """Counts sign-in attempts per account and address, per address and per account (see the
    module); Redis first, memory if it fails."""

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
        self._local = LocalAttempts(clock)
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
        finishing normally forgets the account's failures and marks the address as known to it;
        any other exception uncounts it.
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
        :class:`TooManyLoginAttempts` when one of its logs is over its limit."""
        await self._admit(email, client_address)

    def account_key(self, email: str) -> str:
        """Redis key of an account's log (every address)."""
        return f"{self._key_prefix}:account:{account_digest(email)}"

    def address_key(self, client_address: str | None) -> str:
        """Redis key of a client address's log (every account)."""
        return f"{self._key_prefix}:address:{address_bucket(client_address)}"

    def pair_key(self, email: str, client_address: str | None) -> str:
        """Redis key of the log of an account from one client address."""
        return f"{self._key_prefix}:pair:{account_digest(email)}:{address_bucket(client_address)}"

    def known_key(self, email: str, client_address: str | None) -> str:
        """Redis key marking a client address that signed in to an account."""
        return f"{self._key_prefix}:known:{account_digest(email)}:{address_bucket(client_address)}"

    async def _admit(self, email: str, client_address: str | None) -> _Attempt:
        logs = (
            self.pair_key(email, client_address),
            self.address_key(client_address),
            self.account_key(email),
        )
        known, member = self.known_key(email, client_address), secrets.token_hex(8)
        wait_ms = await self._on_redis(lambda: self._admit_in_redis(logs, known, member))
        in_redis = wait_ms is not None
        if wait_ms is None:
            limits = self.policy.limits()
            checks = [(key, limits[2 * i], limits[2 * i + 1]) for i, key in enumerate(logs)]
            wait_ms = self._local.admit(checks, member, known)
        if wait_ms > 0:
            raise _refused(email, client_address, wait_ms)
        return _Attempt(logs, known, member, in_redis)

    async def _admit_in_redis(self, logs: tuple[str, str, str], known: str, member: str) -> int:
        args: list[int | str] = [member, *self.policy.limits()]
        reply: Any = await self._admit_script(keys=[*logs, known], args=args)
        if not isinstance(reply, list) or len(reply) != 2:
            raise RedisError(f"unexpected reply from the login throttle script: {reply!r}")
        return 0 if int(reply[0]) == 1 else max(1, int(reply[1]))

    async def _settle(self, attempt: _Attempt, *, succeeded: bool) -> None:
        pair, address, account = attempt.logs
        self._local.take_back(address, attempt.member)
        if succeeded:
            self._local.forget(pair)
            self._local.forget(account)
            self._local.mark(attempt.known_key, self.policy.known_address_ms)
        else:
            self._local.take_back(pair, attempt.member)
            self._local.take_back(account, attempt.member)
        if attempt.in_redis:
            await self._on_redis(lambda: self._settle_in_redis(attempt, succeeded))

    async def _settle_in_redis(self, attempt: _Attempt, succeeded: bool) -> None:
        pair, address, account = attempt.logs
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.zrem(address, attempt.member)
            if succeeded:
                pipe.delete(pair, account)
                pipe.set(attempt.known_key, 1, px=self.policy.known_address_ms)
            else:
                pipe.zrem(pair, attempt.member)
                pipe.zrem(account, attempt.member)
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
