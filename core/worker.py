"""What every Celery task shares: a fresh autocommit connection per run, and a task producer.

Task modules live beside their domain (``data_plane/tasks.py``, ``billing/tasks.py``, …) and are
thin shells around async services: :func:`run_connected` runs such a service to completion on
one fresh connection from the same settings the API uses, so the API, the CLI and the worker execute
one code path. The connection is autocommit because the services commit step by step.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from celery import Celery
from psycopg import AsyncConnection
from psycopg.rows import dict_row

from core import settings
from core.db import Conn

Result = TypeVar("Result")
CONNECT_TIMEOUT_S = 5


@contextlib.asynccontextmanager
async def task_connection() -> AsyncIterator[Conn]:
    """A fresh autocommit connection to the configured database."""
    url = settings.database().url
    async with await AsyncConnection.connect(
        url, autocommit=True, row_factory=dict_row, connect_timeout=CONNECT_TIMEOUT_S
    ) as conn:
        yield conn


async def _with_connection(work: Callable[[Conn], Awaitable[Result]]) -> Result:
    async with task_connection() as conn:
        return await work(conn)


def run_connected(work: Callable[[Conn], Awaitable[Result]]) -> Result:
    """Run ``work(conn)`` to completion on a fresh connection (for synchronous callers)."""
    return asyncio.run(_with_connection(work))


@functools.cache
def producer() -> Celery:
    """A Celery app that only sends tasks by name, for processes that run no worker (the API)."""
    url = settings.redis().url
    return Celery("queuecore", broker=url, backend=url, set_as_current=False)


def send_task(name: str, **options: Any) -> None:
    """Queue the task ``name`` (``args``, ``kwargs`` and Celery's options as keywords)."""
    producer().send_task(name, **options)
