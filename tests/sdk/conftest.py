"""The SDK against a real ``queuecore serve`` process (the ``api`` fixture of tests/conftest.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from queuecore import Consumer, QueueCore

from tenants.models import NewOrganisation
from tests.support.processes import stop
from tests.support.restartable import Server
from tests.support.services import Services
from tests.support.tenancy import new_organisation


@pytest.fixture
def org(services: Services) -> NewOrganisation:
    """A fresh Pro organisation (Developer's 50 consume requests/s would throttle acks)."""
    return new_organisation(services.database_url, tier="pro")


@pytest.fixture
def pq(api: str, org: NewOrganisation) -> Iterator[QueueCore]:
    """An SDK client on the organisation's production key."""
    with QueueCore(org.keys["production"].secret, api) as client:
        yield client


def eventually(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``check`` until it is true, or fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what}: not true after {timeout_s}s")


@contextmanager
def stopped_after(consumer: Consumer, timeout_s: float = 20) -> Iterator[Consumer]:
    """Iterate ``consumer`` in the block; it is stopped after ``timeout_s`` so a loop cannot hang."""
    watchdog = threading.Timer(timeout_s, consumer.stop)
    watchdog.start()
    try:
        with consumer:
            yield consumer
    finally:
        watchdog.cancel()


@pytest.fixture
def server(services: Services, tmp_path: Path) -> Iterator[Server]:
    """A restartable API process of the test's own."""
    running = Server(services, tmp_path / "serve.log")
    yield running
    stop(running.process)
