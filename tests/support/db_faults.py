"""A fault-injecting wrapper around a real psycopg async pool: lose a commit's reply.

:class:`LostReplyPool` forwards to the real pool. Armed, the next statement whose text contains
``marker`` is sent for real and its connection then closed before the reply is read (``"after"``:
the commit landed, the client never learns it), or the connection is closed without sending it
(``"before"``: nothing ran). Either way the caller gets the ``OperationalError`` a dropped
connection gives. :attr:`LostReplyPool.unreachable` makes every later checkout time out, as
when PostgreSQL is down.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, Literal

import psycopg
import psycopg_pool

Moment = Literal["before", "after"]


class LostReplyPool:
    """A real pool whose next matching statement loses its reply (see the module's doc)."""

    def __init__(self, inner: Any, marker: str = "qc_commit_flush") -> None:
        self.inner = inner
        self.marker = marker
        self.armed: Moment | None = None
        self.then_unreachable = False
        self.unreachable = False
        self.lost = 0

    def lose_next_reply(self, moment: Moment, *, then_unreachable: bool = False) -> None:
        """Drop the connection of the next matching statement, ``moment`` it is sent."""
        self.armed = moment
        self.then_unreachable = then_unreachable

    @contextlib.asynccontextmanager
    async def connection(self, timeout: float | None = None) -> AsyncIterator[Any]:
        """A real pooled connection, wrapped; a timeout while :attr:`unreachable`."""
        if self.unreachable:
            raise psycopg_pool.PoolTimeout("injected: the database is unreachable")
        async with self.inner.connection(timeout=timeout) as conn:
            yield _Connection(conn, self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _Connection:
    """Forwards to a real connection; ``execute`` may lose its reply."""

    def __init__(self, real: Any, pool: LostReplyPool) -> None:
        self._real = real
        self._pool = pool

    async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        pool = self._pool
        moment = pool.armed
        if moment is None or pool.marker not in str(query):
            return await self._real.execute(query, params, **kwargs)
        pool.armed = None
        if moment == "after":
            await (await self._real.execute(query, params, **kwargs)).fetchall()
        await self._real.close()
        pool.lost += 1
        pool.unreachable = pool.then_unreachable
        raise psycopg.OperationalError("injected: server closed the connection unexpectedly")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)
