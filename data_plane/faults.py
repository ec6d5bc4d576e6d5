"""Fault injection for object storage: wrap a real :class:`ObjectStore`, fail calls on demand.

Used by tests (and chaos runs) to prove the durability contract without stopping S3: a failed PUT
must fail the publishes of its flush, a failed GET must surface as an error, never as data. Every
call is counted, so tests can also assert how many requests reached the store.
"""

from __future__ import annotations

import random
import threading
from collections import Counter

from core.object_store import ObjectStore
from data_plane.maintenance.cleanup import ListedObject, list_objects

OPERATIONS = ("put", "get", "delete", "list_keys", "ping")


class InjectedFault(ConnectionError):
    """A failure injected by :class:`FaultyObjectStore` (looks like a lost connection)."""

    def __init__(self, operation: str, key: str | None = None) -> None:
        super().__init__(f"injected {operation} failure" + (f" for {key}" if key else ""))
        self.operation = operation


class FaultyObjectStore:
    """An :class:`ObjectStore` that forwards to ``inner`` unless told to fail.

    Failures are chosen three ways, per operation: the next ``n`` calls (:meth:`fail_next`),
    every call until :meth:`heal` (:meth:`fail_always`), or at random with a probability
    (:meth:`fail_randomly`) drawn from a generator seeded with ``seed``, so a run is replayable.
    """

    def __init__(self, inner: ObjectStore, seed: int = 0) -> None:
        self.inner = inner
        self.seed = seed
        self.calls: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self._random = random.Random(seed)
        self._next: Counter[str] = Counter()
        self._always: set[str] = set()
        self._rates: dict[str, float] = {}
        self._lock = threading.Lock()

    def fail_next(self, operation: str, times: int = 1) -> None:
        """Fail the next ``times`` calls of ``operation``."""
        self._check(operation)
        with self._lock:
            self._next[operation] += times

    def fail_always(self, *operations: str) -> None:
        """Fail every call of ``operations`` (default: all) until :meth:`heal`."""
        for operation in operations or OPERATIONS:
            self._check(operation)
        with self._lock:
            self._always.update(operations or OPERATIONS)

    def fail_randomly(self, operation: str, probability: float) -> None:
        """Fail each call of ``operation`` with ``probability`` (seeded)."""
        self._check(operation)
        if not 0 <= probability <= 1:
            raise ValueError(f"probability must be within 0..1, got {probability}")
        with self._lock:
            self._rates[operation] = probability

    def heal(self) -> None:
        """Stop injecting failures."""
        with self._lock:
            self._next.clear()
            self._always.clear()
            self._rates.clear()

    def _check(self, operation: str) -> None:
        if operation not in OPERATIONS:
            raise ValueError(f"unknown operation {operation!r}; one of {', '.join(OPERATIONS)}")

    def _enter(self, operation: str, key: str | None = None) -> None:
        """Count the call, and raise if a failure is due."""
        with self._lock:
            self.calls[operation] += 1
            fail = operation in self._always
            if not fail and self._next[operation] > 0:
                self._next[operation] -= 1
                fail = True
            rate = self._rates.get(operation, 0.0)
            if not fail and rate and self._random.random() < rate:
                fail = True
            if fail:
                self.failures[operation] += 1
        if fail:
            raise InjectedFault(operation, key)

    def put(self, key: str, data: bytes) -> None:
        """Store, unless a put failure is due."""
        self._enter("put", key)
        self.inner.put(key, data)

    async def put_async(self, key: str, data: bytes) -> None:
        """Store, unless a put failure is due."""
        self._enter("put", key)
        await self.inner.put_async(key, data)

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """Read, unless a get failure is due."""
        self._enter("get", key)
        return self.inner.get(key, start, end)

    async def get_async(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """Read, unless a get failure is due."""
        self._enter("get", key)
        return await self.inner.get_async(key, start, end)

    def delete(self, keys: list[str]) -> None:
        """Delete, unless a delete failure is due."""
        self._enter("delete")
        self.inner.delete(keys)

    def list_keys(self, prefix: str = "") -> list[str]:
        """List, unless a list failure is due."""
        self._enter("list_keys")
        return self.inner.list_keys(prefix)

    def ping(self) -> None:
        """Ping, unless a ping failure is due."""
        self._enter("ping")
        self.inner.ping()

    def list_objects(self, prefix: str = "") -> list[ListedObject]:
        """Listing with ages (see ``data_plane.maintenance.cleanup``), counted as ``list_keys``."""
        self._enter("list_keys")
        return list_objects(self.inner, prefix)
