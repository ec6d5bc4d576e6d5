"""Counts kept in memory and added to PostgreSQL in the background, none lost to a failed write.

An API process counts per request in a dict (no I/O), and a :class:`PeriodicFlusher` takes the
counts every interval, writes them in one round trip, and puts them back when the write fails, so
they go with the next one. The usage meter and the per-topic traffic counters are two of them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Generic, Protocol, TypeVar

Row = TypeVar("Row")
Connect = Callable[[], AbstractAsyncContextManager[Any]]


class Counts(Protocol[Row]):
    """What a flusher drains: the rows counted so far, and a way to put them back."""

    def take(self) -> list[Row]:
        """The rows counted since the last take, forgotten here."""
        ...

    def restore(self, rows: list[Row]) -> None:
        """Add rows back (a write that failed), on top of what was counted meanwhile."""
        ...


class PeriodicFlusher(Generic[Row]):
    """The background task that writes a counter's rows every ``interval_s``; one per process.

    Subclasses say how rows are written (:meth:`write`) and how a failure is logged.
    """

    def __init__(self, counts: Counts[Row], connect: Connect, interval_s: float, name: str) -> None:
        self._counts = counts
        self._connect = connect
        self._interval_s = interval_s
        self._name = name
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    async def write(self, conn: Any, rows: list[Row]) -> None:
        """Write the rows on ``conn`` (committed when the connection is returned)."""
        raise NotImplementedError

    def log_failure(self, error: Exception) -> None:
        """Say that a flush failed (its counts wait for the next one)."""
        raise NotImplementedError

    def start(self) -> None:
        """Flush every interval from now on."""
        self._task = asyncio.create_task(self._run(), name=self._name)

    async def stop(self) -> None:
        """Stop the task, then flush what is left (the shutdown flush)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush_logged()

    async def flush(self) -> int:
        """Write everything counted so far; rows written. Raises (counts restored) on failure.

        Serialised: a caller that must see its counts in the table (shutdown, tests) waits for
        a flush in progress and then writes the rest.
        """
        async with self._lock:
            rows = self._counts.take()
            if not rows:
                return 0
            try:
                async with self._connect() as conn:
                    await self.write(conn, rows)
            except BaseException:
                self._counts.restore(rows)
                raise
            return len(rows)

    async def flush_logged(self) -> None:
        """:meth:`flush`, with a failure logged (the counts wait for the next flush)."""
        try:
            await self.flush()
        except Exception as exc:
            self.log_failure(exc)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            await self.flush_logged()
