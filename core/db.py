"""PostgreSQL access through psycopg 3, the one way every process reaches it: the API's pool
(:func:`async_pool`), fresh autocommit connections for tasks, CLI commands and listeners
(:class:`Connector`), and synchronous connections for Spark jobs and migrations (:func:`connect`).

The API's pool bounds every wait on PostgreSQL from the client's side (docs/faults.md):
``statement_timeout`` is PostgreSQL's own clock, and a stopped (frozen) server runs no clock. A
round trip that outlives :attr:`BoundedConnection.stall_after_s`, or the request's
:func:`deadline`, or is cancelled, abandons its connection: it is closed at once (an open
transaction then rolls back when the server reads the end of the stream; the pool replaces the
connection), and a cancel request for the statement it was running goes to PostgreSQL in the
background (a statement already sent would otherwise still run, and commit, when the server gets
to it). A stall raises :class:`DatabaseStalled`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar
from typing import Any, Protocol

import psycopg
from psycopg import AsyncConnection, capabilities, generators, waiting
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus
from psycopg.pq.abc import PGcancelConn
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from core.settings import DatabaseSettings

CONNECT_TIMEOUT_S = 5
BACKGROUND_LOCK_TIMEOUT_MS = 30_000  # a background task waits no longer for a lock: it retries
STALL_GRACE_MS = 1_000  # the client waits this much past statement_timeout: the server's own
# timeout (a certain rollback, answered) fires first whenever the server is running at all
CHECK_CLIENT_MS = 1_000  # a backend whose client has gone stops its statement within this
_ACTIVE = TransactionStatus.ACTIVE
_WAIT_INTERVAL_S = 0.1  # psycopg's own default
CANCEL_TIMEOUT_S = 2.0  # to deliver a cancel request; PostgreSQL reads it even after that
_cancelling: set[asyncio.Task[None]] = set()  # cancel requests on their way

_deadline: ContextVar[tuple[float, float] | None] = ContextVar(
    "queuecore_db_deadline", default=None
)  # end, budget


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


class DatabaseStalled(psycopg.OperationalError):
    """PostgreSQL did not answer within the client's bound; the connection was closed."""


@contextlib.contextmanager
def deadline(budget_s: float | None) -> Iterator[None]:
    """Every wait of the block on a bounded pool (for a connection, for a statement) ends at
    most ``budget_s`` from now (None: only the per-statement bound)."""
    value = None if budget_s is None else (time.monotonic() + budget_s, budget_s)
    token = _deadline.set(value)
    try:
        yield
    finally:
        _deadline.reset(token)


def rearm() -> None:
    """Start the current :func:`deadline` again with its whole budget: each pull of a long poll
    or a stream is a request of its own to PostgreSQL."""
    current = _deadline.get()
    if current is not None:
        _deadline.set((time.monotonic() + current[1], current[1]))


def remaining_s() -> float | None:
    """Seconds left before the current :func:`deadline` (None: none is set)."""
    current = _deadline.get()
    return None if current is None else current[0] - time.monotonic()


class BoundedConnection(AsyncConnection[DictRow]):
    """An async connection whose every round trip ends within :attr:`stall_after_s` and the
    current :func:`deadline`, or closes the connection and raises :class:`DatabaseStalled`.

    Interrupted (a cancelled request), it closes the connection at once rather than asking the
    server to cancel and waiting up to 10 s for the answer, as psycopg does: a frozen server
    never answers, and the wait would hold the cancelled request.
    """

    stall_after_s: float | None = None  # set by the pool on each new connection

    async def wait(
        self, gen: Any, interval: float = _WAIT_INTERVAL_S, timeout: float | None = None
    ) -> Any:
        """Run ``gen`` on the connection, bounded (see the class)."""
        bound = _bound_s(self.stall_after_s)
        if bound is None or (timeout is not None and timeout <= bound):
            return await super().wait(gen, interval, timeout)
        if bound <= 0:
            self.pgconn.finish()  # nothing was sent
            raise DatabaseStalled("the request's time for PostgreSQL is spent")
        try:
            return await waiting.wait_async(gen, self.pgconn.socket, interval, bound)
        except pg_errors._WaitTimeout:
            self._abandon()
            raise DatabaseStalled(f"PostgreSQL did not answer within {bound:.1f} s") from None
        except Exception:
            raise  # the server's own answer (an error), or a connection already gone
        except BaseException:  # interrupted: a cancelled request
            if self.pgconn.transaction_status == _ACTIVE:
                self._abandon()
            raise

    def _abandon(self) -> None:
        """Close the connection now; cancel its statement in the background (see the module)."""
        cancel: PGcancelConn | None = None
        if capabilities.has_cancel_safe():
            with contextlib.suppress(psycopg.Error):
                cancel = self.pgconn.cancel_conn()
                cancel.start()
        self.pgconn.finish()
        if cancel is not None:
            task = asyncio.get_running_loop().create_task(_send_cancel(cancel))
            _cancelling.add(task)
            task.add_done_callback(_cancelling.discard)


async def _send_cancel(cancel: PGcancelConn) -> None:
    """Deliver a cancel request, waiting at most :data:`CANCEL_TIMEOUT_S` for it to be taken."""
    try:
        await waiting.wait_conn_async(
            generators.cancel(cancel), interval=_WAIT_INTERVAL_S, timeout=CANCEL_TIMEOUT_S
        )
    except Exception:  # noqa: S110 (best effort: the server may be frozen, or the query done)
        pass
    finally:
        cancel.finish()


def _bound_s(stall_after_s: float | None) -> float | None:
    left = remaining_s()
    if left is None:
        return stall_after_s
    return left if stall_after_s is None else min(left, stall_after_s)


class BoundedPool(AsyncConnectionPool[AsyncConnection[DictRow]]):
    """An async pool of :class:`BoundedConnection`; waiting for a connection also ends at the
    current :func:`deadline`."""

    async def getconn(self, timeout: float | None = None) -> AsyncConnection[DictRow]:
        """A connection, waiting no longer than the pool's timeout and the deadline."""
        left = remaining_s()
        if left is not None:
            if left <= 0:
                raise PoolTimeout("the request's time for PostgreSQL is spent")
            timeout = min(self.timeout if timeout is None else timeout, left)
        return await super().getconn(timeout)


def session_options(statement_timeout_ms: int) -> str:
    """libpq ``options`` bounding each statement and each idle transaction (0: unbounded), and
    ending a statement whose client has gone."""
    idle_ms = 0 if statement_timeout_ms == 0 else max(2 * statement_timeout_ms, 10_000)
    return (
        f"-c statement_timeout={statement_timeout_ms} "
        f"-c idle_in_transaction_session_timeout={idle_ms} "
        f"-c client_connection_check_interval={CHECK_CLIENT_MS}"
    )


def stall_after_ms(settings: DatabaseSettings) -> int | None:
    """How long the client waits for one round trip before it drops the connection."""
    if settings.statement_timeout_ms == 0:
        return None
    return settings.statement_timeout_ms + STALL_GRACE_MS


def tcp_options(settings: DatabaseSettings) -> dict[str, int]:
    """Keepalives and an unacknowledged-data timeout: a peer gone from the network (not a
    stopped process: its kernel still answers) is noticed without waiting for the OS's hours."""
    options = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 3}
    return options | {"keepalives_count": 3, "tcp_user_timeout": stall_after_ms(settings) or 0}


AsyncPool = AsyncConnectionPool[AsyncConnection[DictRow]]


def async_pool(settings: DatabaseSettings, name: str) -> AsyncPool:
    """A pool for the asyncio API process. Opened by the application's lifespan.

    Every statement on it is bounded by ``statement_timeout_ms`` on the server and a second
    later on the client (:class:`BoundedConnection`), whatever the server does; a transaction
    left idle by ``idle_in_transaction_session_timeout``.
    """
    stall_ms = stall_after_ms(settings)

    async def configure(conn: AsyncConnection[DictRow]) -> None:
        if isinstance(conn, BoundedConnection):
            conn.stall_after_s = None if stall_ms is None else stall_ms / 1000

    return BoundedPool(
        settings.url,
        connection_class=BoundedConnection,
        min_size=settings.pool_min,
        max_size=settings.pool_max,
        kwargs={
            "row_factory": dict_row,
            "connect_timeout": CONNECT_TIMEOUT_S,
            "options": session_options(settings.statement_timeout_ms),
            **tcp_options(settings),
        },
        configure=configure,
        name=name,
        open=False,
        timeout=5,
        reconnect_timeout=0,
    )


def request_budget_s(settings: DatabaseSettings) -> float | None:
    """The :func:`deadline` of one API request (None: unbounded)."""
    return settings.request_timeout_ms / 1000 or None


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

    def __init__(
        self,
        url: str,
        connect_timeout_s: int = CONNECT_TIMEOUT_S,
        lock_timeout_ms: int = BACKGROUND_LOCK_TIMEOUT_MS,
    ) -> None:
        self.url = url
        self.connect_timeout_s = connect_timeout_s
        self.lock_timeout_ms = lock_timeout_ms

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Conn]:
        """A new connection, closed when the block ends; a statement that waits for a lock
        longer than ``lock_timeout_ms`` fails (``LockNotAvailable``) instead of holding the task
        (and its worker slot) for as long as another session keeps the lock."""
        async with await AsyncConnection.connect(
            self.url,
            autocommit=True,
            row_factory=dict_row,
            connect_timeout=self.connect_timeout_s,
            options=f"-c lock_timeout={self.lock_timeout_ms}",
        ) as conn:
            yield conn
