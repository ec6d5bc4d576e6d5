"""PostgreSQL access through psycopg 3, the one way every process reaches it: the API's pool
(:func:`async_pool`), fresh autocommit connections for tasks, CLI commands and listeners
(:class:`Connector`), and synchronous connections for Spark jobs and migrations (:func:`connect`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import psycopg
from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from core.settings import DatabaseSettings

CONNECT_TIMEOUT_S = 5


def connect(
    url: str, *, autocommit: bool = False, connect_timeout_s: int = CONNECT_TIMEOUT_S
) -> psycopg.Connection[dict[str, Any]]:
    """One synchronous connection, rows as dicts."""
    return psycopg.connect(
        url, autocommit=autocommit, row_factory=dict_row, connect_timeout=connect_timeout_s
    )


def connect_tuples(url: str) -> psycopg.Connection[tuple[Any, ...]]:
    """One synchronous connection, rows as tuples (what a Spark job turns into a DataFrame)."""
    return psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S)


Conn = AsyncConnection[DictRow]
"""An async connection whose rows are dicts: the type every service function takes."""


def session_options(statement_timeout_ms: int) -> str:
    """libpq ``options`` bounding each statement and each idle transaction (0: unbounded)."""
    idle_ms = 0 if statement_timeout_ms == 0 else max(2 * statement_timeout_ms, 10_000)
    return (
        f"-c statement_timeout={statement_timeout_ms} "
        f"-c idle_in_transaction_session_timeout={idle_ms}"
    )


AsyncPool = AsyncConnectionPool[AsyncConnection[DictRow]]


def async_pool(settings: DatabaseSettings, name: str) -> AsyncPool:
    """A pool for the asyncio API process. Opened by the application's lifespan.

    Every statement on it is bounded by ``statement_timeout_ms`` (a stalled PostgreSQL fails
    the request fast, shorter than a client's timeout, instead of committing after the client
    gave up), and a transaction left idle by ``idle_in_transaction_session_timeout``.
    """
    return AsyncConnectionPool(
        settings.url,
        connection_class=AsyncConnection[DictRow],
        min_size=settings.pool_min,
        max_size=settings.pool_max,
        kwargs={
            "row_factory": dict_row,
            "connect_timeout": CONNECT_TIMEOUT_S,
            "options": session_options(settings.statement_timeout_ms),
        },
        name=name,
        open=False,
        timeout=5,
        reconnect_timeout=0,
    )


@contextlib.asynccontextmanager
async def autocommit(conn: AsyncConnection[Any]) -> AsyncIterator[None]:
    """Autocommit on a pooled connection (each statement its own transaction, no ``BEGIN`` or
    ``COMMIT`` round trips), then its previous mode back. A transaction the caller left open
    (a lookup, say) is committed first: the mode can change only on an idle connection."""
    if conn.info.transaction_status != TransactionStatus.IDLE:
        await conn.commit()
    previous = conn.autocommit
    await conn.set_autocommit(True)
    try:
        yield
    finally:
        with contextlib.suppress(psycopg.Error):
            await conn.set_autocommit(previous)


async def ping(pool: AsyncPool, timeout_s: float) -> None:
    """One round trip on a pooled connection, within ``timeout_s`` to get it (readiness)."""
    async with pool.connection(timeout=timeout_s) as conn:
        await conn.execute("SELECT 1")


class Database(Protocol):
    """Where a service gets its connections: the API's pool, or a task's :class:`Connector`."""

    def connection(self) -> AbstractAsyncContextManager[Conn]:
        """A connection for the block; a pool's commits at its end (rolls back on an error)."""
        ...


class Connector:
    """Fresh autocommit connections, one per :meth:`connection`: for Celery tasks and CLI
    commands, which run each piece of work in an event loop of its own (a pool would not
    outlive it) and whose work commits step by step."""

    def __init__(self, url: str, connect_timeout_s: int = CONNECT_TIMEOUT_S) -> None:
        self.url = url
        self.connect_timeout_s = connect_timeout_s

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Conn]:
        """A new connection, closed when the block ends."""
        async with await AsyncConnection.connect(
            self.url, autocommit=True, row_factory=dict_row, connect_timeout=self.connect_timeout_s
        ) as conn:
            yield conn
