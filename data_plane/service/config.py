"""Runtime configuration through the door: an environment's keys and values (``/v1/config``)."""

from __future__ import annotations

from core.db import AsyncPool
from data_plane.config import service as config
from data_plane.config.service import ConfigCache, ConfigEntry, ConfigList
from data_plane.service.scope import Caller


class RuntimeConfig:
    """The caller's environment's runtime configuration; a change is seen by this process at
    once and by every replica within the cache's 2 s."""

    def __init__(self, db: AsyncPool, cache: ConfigCache) -> None:
        self._db = db
        self._cache = cache

    async def put(self, caller: Caller, key: str, value: str) -> ConfigEntry:
        """Set ``key`` to ``value`` (created or replaced)."""
        async with self._db.connection() as conn:
            entry = await config.put(conn, caller.environment_id, key, value)
        self._cache.forget(caller.environment_id)
        return entry

    async def get(self, caller: Caller, key: str) -> ConfigEntry:
        """The entry, or 404 ``CONFIG_KEY_NOT_FOUND``."""
        async with self._db.connection() as conn:
            return await config.get(conn, caller.environment_id, key)

    async def list_all(self, caller: Caller, prefix: str = "") -> ConfigList:
        """The entries whose key starts with ``prefix``, by key."""
        async with self._db.connection() as conn:
            found = await config.entries(conn, caller.environment_id, prefix)
        return ConfigList(found, len(found))

    async def delete(self, caller: Caller, key: str) -> None:
        """Remove ``key`` (404 if it is not set)."""
        async with self._db.connection() as conn:
            await config.delete(conn, caller.environment_id, key)
        self._cache.forget(caller.environment_id)
