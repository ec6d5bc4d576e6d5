"""Every class of PostgreSQL error is answered as documented (docs/faults.md, "Database
errors"): an outage, a timeout or a session PostgreSQL ended is a 503 with ``Retry-After``, a
lost race a 409, a value the database cannot hold a 422, and only a programming error (a bug)
a 500. Each error is raised for real by the session's PostgreSQL, on the API's own pool,
through a test route of the real application.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from litestar import Request, get
from litestar.params import FromPath
from litestar.testing import TestClient

from control_plane.edge.resources import resources_of
from core.db import Conn
from tests.support.services import Services


async def _idle_in_transaction(conn: Conn) -> None:
    await conn.execute("SET idle_in_transaction_session_timeout = 100")
    await asyncio.sleep(0.5)  # PostgreSQL ends the session meanwhile
    await conn.execute("SELECT 1")


async def _statement_timeout(conn: Conn) -> None:
    await conn.execute("SET LOCAL statement_timeout = 50")
    await conn.execute("SELECT pg_sleep(2)")


async def _terminated(conn: Conn) -> None:
    await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")


async def _read_only(conn: Conn) -> None:
    await conn.execute("SET TRANSACTION READ ONLY")  # as on a replica after a failover
    await conn.execute("UPDATE organisations SET name = name WHERE false")


async def _aborted_transaction(conn: Conn) -> None:
    with contextlib.suppress(Exception):  # a caller that swallowed an error and went on
        await conn.execute("SELECT 1 / 0")
    await conn.execute("SELECT 1")


async def _unique(conn: Conn) -> None:
    await conn.execute("CREATE TEMP TABLE race (id int PRIMARY KEY) ON COMMIT DROP")
    await conn.execute("INSERT INTO race VALUES (1)")
    await conn.execute("INSERT INTO race VALUES (1)")


async def _out_of_range(conn: Conn) -> None:
    await conn.execute("SELECT 2147483647::integer + 1")


async def _syntax(conn: Conn) -> None:
    await conn.execute("SELEC 1")


CASES: dict[str, tuple[Callable[[Conn], Awaitable[None]], int, str]] = {
    "idle-in-transaction-timeout": (_idle_in_transaction, 503, "SERVICE_UNAVAILABLE"),
    "statement-timeout": (_statement_timeout, 503, "SERVICE_UNAVAILABLE"),
    "terminated-by-admin": (_terminated, 503, "SERVICE_UNAVAILABLE"),
    "read-only-transaction": (_read_only, 503, "SERVICE_UNAVAILABLE"),
    "aborted-transaction": (_aborted_transaction, 503, "SERVICE_UNAVAILABLE"),
    "unique-violation": (_unique, 409, "CONFLICT"),
    "numeric-out-of-range": (_out_of_range, 422, "VALIDATION_ERROR"),
    "syntax-error": (_syntax, 500, "INTERNAL_ERROR"),
}


@get("/test/database-error/{case:str}")
async def database_error(request: Request[Any, Any, Any], case: FromPath[str]) -> None:
    """Run the case's statements on a connection of the API's pool."""
    async with resources_of(request.app).db.connection() as conn:
        await CASES[case][0](conn)


@pytest.fixture(scope="module")
def app_client(services: Services) -> Iterator[TestClient]:
    from control_plane.app import create_app

    with TestClient(
        app=create_app(extra_route_handlers=[database_error]), raise_server_exceptions=False
    ) as client:
        yield client


@pytest.mark.parametrize("case", CASES)
def test_a_database_error_is_answered_as_documented(app_client: TestClient, case: str) -> None:
    _, status, code = CASES[case]
    response = app_client.get(f"/test/database-error/{case}")
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["code"], error["status"]) == (code, status)
    assert error["requestId"] == response.headers["x-request-id"]
    assert ("retry-after" in response.headers) == (status == 503)
    assert "SELEC" not in error["message"] and "organisations" not in error["message"]


def test_the_pool_serves_again_after_sessions_postgresql_ended(app_client: TestClient) -> None:
    for case in ("idle-in-transaction-timeout", "terminated-by-admin"):
        assert app_client.get(f"/test/database-error/{case}").status_code == 503
    assert app_client.get("/readyz").json()["checks"]["postgres"] == "ok"
