"""Throttle keys: token buckets checked before a fair group delivers a message.

A message is delivered only when each of its throttle keys holds a token; it then takes one
from each. A key's rate and burst are the environment's runtime configuration
(``throttle.<key>.rate``, ``throttle.<key>.burst``, burst defaulting to the rate); a key without a
rate is unlimited. The buckets live in Redis (``lua/token_bucket.lua``, one atomic call per turn
of the round), so they hold across replicas. A refused message waits, without counting an
attempt, and the pull says when a token is due so a waiting consumer wakes for it.

While Redis is unreachable each replica keeps the same buckets in its own memory (with the same
rates): N replicas then admit up to N times a key's rate. Throttling never stops delivery
altogether and never fails a pull; a warning is logged at most every 30 s
(:class:`core.redis_outage.RedisOutage`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources

from redis.asyncio import Redis
from redis.exceptions import RedisError

from core.redis_outage import RedisOutage
from data_plane.config.service import Limit
from observability.logging import get_logger

log = get_logger("queuecore.throttle")

KEY_PREFIX = "qc:tb"
REDIS_TIMEOUT_S = 0.5
REDIS_RETRY_S = 5.0
MAX_LOCAL_BUCKETS = 100_000
TOKEN_BUCKET_LUA = (
    resources.files("data_plane.delivery").joinpath("lua", "token_bucket.lua").read_text("utf-8")
)

# A candidate message: its group (the fairness key: one refusal holds back the group's later
# messages) and its throttle keys.
Candidate = tuple[str, Sequence[str]]


@dataclass(frozen=True, slots=True)
class Admission:
    """Which candidates were admitted, when a refused one's keys next have a token, and each
    key's tokens after the call."""

    admitted: list[bool]
    wait_ms: int | None
    tokens: dict[str, float] = field(default_factory=dict)


def bucket_key(environment_id: str, key: str) -> str:
    """The Redis key of an environment's bucket (hash-tagged, so one call's keys share a slot)."""
    return f"{KEY_PREFIX}:{{{environment_id}}}:{key}"


class LocalBuckets:
    """The same buckets in this process's memory: what a replica uses while Redis is down."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[str, str], tuple[float, float]] = {}  # tokens, at (s)

    def take(
        self, environment_id: str, limits: Mapping[str, Limit], candidates: Sequence[Candidate]
    ) -> Admission:
        """The token bucket script's rules, here."""
        now = time.monotonic()
        tokens = {
            key: self._refilled(environment_id, key, limit, now) for key, limit in limits.items()
        }
        admitted: list[bool] = []
        blocked: set[str] = set()
        wait: float | None = None
        for group, keys in candidates:
            short = [k for k in keys if tokens[k] < 1]
            ok = group not in blocked and not short
            if group not in blocked:
                for key in short:
                    rate = limits[key].rate
                    ms = (1 - tokens[key]) * 1000 / rate if rate > 0 else 60_000
                    wait = ms if wait is None else min(wait, ms)
            if ok:
                for key in keys:
                    tokens[key] -= 1
            else:
                blocked.add(group)
            admitted.append(ok)
        if len(self._buckets) > MAX_LOCAL_BUCKETS:
            self._buckets.clear()
        for key, held in tokens.items():
            self._buckets[(environment_id, key)] = (held, now)
        return Admission(admitted, None if wait is None else int(wait) + 1, tokens)

    def _refilled(self, environment_id: str, key: str, limit: Limit, now: float) -> float:
        held, at = self._buckets.get((environment_id, key), (limit.burst, now))
        return min(held + max(now - at, 0.0) * limit.rate, limit.burst)


class Buckets:
    """The throttle buckets of every environment: Redis first, this process's memory if it fails."""

    def __init__(self, redis: Redis | None) -> None:
        self._script = None if redis is None else redis.register_script(TOKEN_BUCKET_LUA)
        self._local = LocalBuckets()
        self._outage = RedisOutage(
            "throttle", "per-process token buckets", log, retry_s=REDIS_RETRY_S
        )

    async def take(
        self, environment_id: str, limits: Mapping[str, Limit], candidates: Sequence[Candidate]
    ) -> Admission:
        """Admit what has tokens (taking them), in order; see the module docstring."""
        if self._script is not None and not self._outage.skip():
            try:
                admission = await asyncio.wait_for(
                    self._redis(environment_id, limits, candidates), REDIS_TIMEOUT_S
                )
            except (RedisError, OSError, TimeoutError) as exc:
                self._outage.failed(exc)
            else:
                self._outage.recovered()
                return admission
        return self._local.take(environment_id, limits, candidates)

    async def _redis(
        self, environment_id: str, limits: Mapping[str, Limit], candidates: Sequence[Candidate]
    ) -> Admission:
        assert self._script is not None
        names = list(limits)
        index = {name: i + 1 for i, name in enumerate(names)}
        args: list[str | int | float] = []
        for name in names:
            args += [repr(limits[name].rate), repr(limits[name].burst)]
        for group, keys in candidates:
            args += [group, len(keys), *[index[k] for k in keys]]
        reply = await self._script(keys=[bucket_key(environment_id, n) for n in names], args=args)
        flags, wait = _text(reply[0]), int(reply[1])
        tokens = {name: float(_text(value)) for name, value in zip(names, reply[2:], strict=True)}
        return Admission([f == "1" for f in flags], None if wait < 0 else wait, tokens)


def _text(value: bytes | str | int) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Throttle:
    """One pull's view of an environment's throttle keys: admits candidates, remembers when the
    earliest refused one can go."""

    def __init__(self, buckets: Buckets, environment_id: str, limits: Mapping[str, Limit]) -> None:
        self._buckets = buckets
        self._environment_id = environment_id
        self._limits = limits
        self.wait_ms: int | None = None

    async def admit(self, candidates: Sequence[Candidate]) -> list[bool]:
        """Whether each candidate may go now (in order; a refusal holds back its group's later
        ones). Keys without a rate are unlimited; a pull with none limited asks nobody."""
        limited = [(group, _limited(keys, self._limits)) for group, keys in candidates]
        asked = [c for c in limited if c[1]]
        if not asked:
            return [True] * len(candidates)
        used = {key: self._limits[key] for _, keys in asked for key in keys}
        admission = await self._buckets.take(self._environment_id, used, asked)
        if admission.wait_ms is not None:
            self.wait_ms = min(self.wait_ms or admission.wait_ms, admission.wait_ms)
        answers = iter(admission.admitted)
        blocked: set[str] = set()
        verdicts = []
        for group, keys in limited:
            answer = next(answers) if keys else True
            ok = group not in blocked and answer
            if not ok:
                blocked.add(group)
            verdicts.append(ok)
        return verdicts

    async def admit_prefix(self, group: str, keys: Sequence[Sequence[str]]) -> int:
        """How many of a fairness key's next messages (their throttle keys in order) may go."""
        verdicts = await self.admit([(group, k) for k in keys])
        return next((i for i, ok in enumerate(verdicts) if not ok), len(verdicts))


def _limited(keys: Sequence[str], limits: Mapping[str, Limit]) -> tuple[str, ...]:
    """The message's throttle keys that have a rate, each once."""
    return tuple(dict.fromkeys(k for k in keys if k in limits))
