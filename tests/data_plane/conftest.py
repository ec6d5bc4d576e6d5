"""Fixtures shared by the data-plane tests."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from core.settings import LogSettings
from observability.logging import configure as configure_logs


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    """The process's log lines, as JSON, while the test runs (then back to stderr)."""
    lines = io.StringIO()
    configure_logs(LogSettings("INFO", "json"), stream=lines)
    yield lines
    configure_logs(LogSettings.from_env())
