"""Session-wide real services, the in-process API client, a real Celery worker, unique names."""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from litestar.testing import TestClient

from core import settings
from infra import migrate
from infra.embedded import free_port_block
from tests.support.processes import http_status, queuecore, stop, wait_for
from tests.support.services import Services, start_services, unavailable


@pytest.fixture(scope="session")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    """PostgreSQL, S3 and Redis, migrated, exported as ``QUEUECORE_*`` for in-process code."""
    started = start_services(tmp_path_factory.mktemp("services"))
    migrate.apply(started.database_url)
    saved = {key: os.environ.get(key) for key in started.env()}
    os.environ.update(started.env())
    settings.clear_caches()
    yield started
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    settings.clear_caches()
    started.stop()


@pytest.fixture(scope="session")
def client(services: Services) -> Iterator[TestClient]:
    """The API application in this process, with its lifespan running."""
    from control_plane.app import create_app

    with TestClient(app=create_app(), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def api(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real ``queuecore serve`` process (one worker) for the module; yields its base URL."""
    port, log = free_port_block(), tmp_path_factory.mktemp("api") / "serve.log"
    proc = queuecore(
        ["serve", "--workers", "1"], {**services.env(), "QUEUECORE_HTTP_PORT": str(port)}, log
    )
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: http_status(f"{base}/readyz") == 200, 60, "api ready", proc, log)
    yield base
    stop(proc)


@pytest.fixture
def unique() -> Callable[[str], str]:
    """Names that no other test uses, so tests can share the database."""
    return lambda prefix="t": f"{prefix}-{secrets.token_hex(5)}"


@pytest.fixture(scope="session")
def celery_worker(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A real ``queuecore worker`` process on the session's Redis; yields its log path."""
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    proc = queuecore(
        ["worker", "--concurrency", "2", "--hostname", f"test-{os.getpid()}@localhost"],
        services.env(),
        log,
    )
    try:
        wait_for(
            lambda: "ready" in log.read_text(errors="replace"), 60, "celery worker ready", proc, log
        )
    except AssertionError as exc:
        stop(proc)
        unavailable(f"celery worker did not start: {exc}")
    yield log
    stop(proc)


def pytest_report_header() -> list[str]:
    """Say where the suite gets its services."""
    external = [
        k
        for k in ("QUEUECORE_DATABASE_URL", "QUEUECORE_REDIS_URL", "QUEUECORE_OBJECT_STORE_URL")
        if os.environ.get(k)
    ]
    where = (
        f"external: {', '.join(external)}"
        if external
        else "embedded services in a temporary directory"
    )
    return [f"queuecore services: {where}; python {sys.version.split()[0]}"]
