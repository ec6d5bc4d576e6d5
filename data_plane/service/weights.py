"""Organisations' tier weights for the delivery shares, cached: a pull never waits for one."""

from __future__ import annotations

import asyncio
import time

import psycopg

from core.db import AsyncPool
from observability.logging import get_logger
from tenants import service as tenants
from tenants.errors import OrganisationNotFound
from tenants.tiers import tier_weight

log = get_logger("queuecore.delivery")

WEIGHT_TTL_S = 60.0  # a tier change reaches the shares within this
UNKNOWN_WEIGHT = 1  # until it is loaded: the least share, never more than due
MAX_CACHED = 10_000


class OrgWeights:
    """``weights(organisation_id)``: its tier weight from the cache; a missing or stale one is
    loaded in the background (one load per organisation at a time) and answers the last known
    weight, or 1, meanwhile."""

    def __init__(self, db: AsyncPool, ttl_s: float = WEIGHT_TTL_S) -> None:
        self._db = db
        self._ttl_s = ttl_s
        self._weights: dict[str, tuple[float, int]] = {}  # organisation: (expires, weight)
        self._loading: dict[str, asyncio.Task[None]] = {}

    def __call__(self, organisation_id: str) -> int:
        cached = self._weights.get(organisation_id)
        stale = cached is None or cached[0] <= time.monotonic()
        if stale and organisation_id not in self._loading:
            task = asyncio.get_running_loop().create_task(self._load(organisation_id))
            self._loading[organisation_id] = task
            task.add_done_callback(lambda _: self._loading.pop(organisation_id, None))
        return UNKNOWN_WEIGHT if cached is None else cached[1]

    async def close(self) -> None:
        """Stop the loads under way (before the pool closes)."""
        tasks = list(self._loading.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _load(self, organisation_id: str) -> None:
        try:
            async with self._db.connection() as conn:
                organisation = await tenants.get_organisation(conn, organisation_id)
            weight = tier_weight(organisation.limits.publish_per_s)
        except OrganisationNotFound:
            weight = UNKNOWN_WEIGHT
        except (psycopg.Error, OSError, TimeoutError) as exc:  # the pool timed out, say
            log.warning(
                "organisation weight not loaded", organisation_id=organisation_id, error=str(exc)
            )
            return  # the next contended pull tries again
        if len(self._weights) >= MAX_CACHED:
            self._weights.clear()
        self._weights[organisation_id] = (time.monotonic() + self._ttl_s, weight)
