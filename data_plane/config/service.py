"""An environment's runtime configuration: keys and values in PostgreSQL, cached per process.

A change is seen at once by the replica that made it and by every other within
:data:`CACHE_TTL_S` (each replica reloads an environment's entries when its copy is older). The
keys QueueCore itself reads are validated when set: ``throttle.<key>.rate`` and
``throttle.<key>.burst`` must be numbers ≥ 0.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

import msgspec

from core.db import AsyncPool, Conn
from core.errors import Conflict, NotFound, ValidationFailed
from data_plane.config import queries as q

CACHE_TTL_S = 2.0
MAX_ENTRIES = 1_000  # per environment
MAX_KEY_CHARS = 200
MAX_VALUE_CHARS = 4_096
MAX_CACHED_ENVIRONMENTS = 10_000
THROTTLE_PREFIX = "throttle."
KEY_PATTERN = r"^[^\x00-\x20\x7f]{1,200}$"  # printable, no spaces
_KEY = re.compile(KEY_PATTERN)


class ConfigKeyNotFound(NotFound):
    """The environment's runtime configuration has no such key."""

    code = "CONFIG_KEY_NOT_FOUND"

    def __init__(self, key: str) -> None:
        super().__init__(f"The runtime configuration has no key '{key}'.", key=key)


class ConfigLimitReached(Conflict):
    """The environment holds as many keys as it may."""

    code = "CONFIG_LIMIT_REACHED"


class ConfigValue(msgspec.Struct, forbid_unknown_fields=True):
    """``PUT /v1/config/{key}``."""

    value: Annotated[str, msgspec.Meta(max_length=MAX_VALUE_CHARS)]


class ConfigEntry(msgspec.Struct):
    """One key and its value."""

    key: str
    value: str


class ConfigList(msgspec.Struct, rename="camel"):
    """``GET /v1/config?prefix=``: the matching entries by key, and how many there are."""

    entries: list[ConfigEntry]
    total_count: int


def check_key(key: str) -> None:
    """Keys are 1-200 printable characters without spaces."""
    if not _KEY.match(key):
        raise ValidationFailed(
            f"config keys are 1-{MAX_KEY_CHARS} printable characters without spaces", field="key"
        )


def check_value(key: str, value: str) -> None:
    """The keys QueueCore reads must hold what it can use."""
    limit = throttle_setting(key)
    if limit is None:
        return
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not (number >= 0 and number < float("inf")):
        raise ValidationFailed(f"{key} must be a number of tokens ≥ 0", field="value")


def throttle_setting(key: str) -> tuple[str, str] | None:
    """``(throttle key, "rate" | "burst")`` for ``throttle.<key>.rate|burst``, else None."""
    if not key.startswith(THROTTLE_PREFIX):
        return None
    name, _, setting = key[len(THROTTLE_PREFIX) :].rpartition(".")
    if not name or setting not in ("rate", "burst"):
        return None
    return name, setting


async def put(conn: Conn, environment_id: str, key: str, value: str) -> ConfigEntry:
    """Set ``key`` (created or replaced), within the environment's :data:`MAX_ENTRIES`."""
    check_key(key)
    check_value(key, value)
    params = {"environment_id": environment_id, "key": key, "value": value}
    if await (await conn.execute(q.SELECT_ENTRY, params)).fetchone() is None:
        row = await (await conn.execute(q.COUNT_ENTRIES, params)).fetchone()
        if row is not None and row["entries"] >= MAX_ENTRIES:
            raise ConfigLimitReached(
                f"an environment holds at most {MAX_ENTRIES} configuration keys", limit=MAX_ENTRIES
            )
    row = await (await conn.execute(q.UPSERT_ENTRY, params)).fetchone()
    assert row is not None
    return ConfigEntry(row["key"], row["value"])


async def get(conn: Conn, environment_id: str, key: str) -> ConfigEntry:
    """The entry, or 404 ``CONFIG_KEY_NOT_FOUND``."""
    params = {"environment_id": environment_id, "key": key}
    row = await (await conn.execute(q.SELECT_ENTRY, params)).fetchone()
    if row is None:
        raise ConfigKeyNotFound(key)
    return ConfigEntry(row["key"], row["value"])


async def entries(conn: Conn, environment_id: str, prefix: str = "") -> list[ConfigEntry]:
    """The entries whose key starts with ``prefix``, by key."""
    pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    params = {"environment_id": environment_id, "pattern": pattern}
    rows = await (await conn.execute(q.SELECT_ENTRIES, params)).fetchall()
    return [ConfigEntry(row["key"], row["value"]) for row in rows]


async def delete(conn: Conn, environment_id: str, key: str) -> None:
    """Remove ``key``, or 404 ``CONFIG_KEY_NOT_FOUND``."""
    params = {"environment_id": environment_id, "key": key}
    if await (await conn.execute(q.DELETE_ENTRY, params)).fetchone() is None:
        raise ConfigKeyNotFound(key)


@dataclass(frozen=True, slots=True)
class Limit:
    """A throttle key's token bucket: tokens added per second, and how many it holds at most."""

    rate: float
    burst: float


@dataclass(frozen=True, slots=True)
class Snapshot:
    """An environment's configuration as one replica saw it at one time."""

    values: Mapping[str, str]

    def throttles(self) -> dict[str, Limit]:
        """Every throttle key with a rate (burst defaults to the rate)."""
        settings: dict[str, dict[str, float]] = {}
        for key, value in self.values.items():
            found = throttle_setting(key)
            if found is not None:
                try:
                    settings.setdefault(found[0], {})[found[1]] = max(float(value), 0.0)
                except ValueError:
                    continue
        return {
            name: Limit(s["rate"], s.get("burst", s["rate"]))
            for name, s in settings.items()
            if "rate" in s
        }


class ConfigCache:
    """Each environment's entries as this process last read them, at most :data:`CACHE_TTL_S`
    old; the process's own writes drop its copy at once."""

    def __init__(self, db: AsyncPool, ttl_s: float = CACHE_TTL_S) -> None:
        self._db = db
        self._ttl_s = ttl_s
        self._snapshots: dict[str, tuple[float, Snapshot, dict[str, Limit]]] = {}

    async def throttles(self, environment_id: str) -> dict[str, Limit]:
        """The environment's throttle limits (cached)."""
        cached = self._snapshots.get(environment_id)
        if cached is not None and cached[0] > time.monotonic():
            return cached[2]
        async with self._db.connection() as conn:
            found = await entries(conn, environment_id, THROTTLE_PREFIX)
        snapshot = Snapshot({e.key: e.value for e in found})
        if len(self._snapshots) >= MAX_CACHED_ENVIRONMENTS:
            self._snapshots.clear()
        limits = snapshot.throttles()
        self._snapshots[environment_id] = (time.monotonic() + self._ttl_s, snapshot, limits)
        return limits

    def forget(self, environment_id: str) -> None:
        """Drop an environment's copy (this process changed it)."""
        self._snapshots.pop(environment_id, None)
