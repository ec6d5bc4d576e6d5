"""QUEUECORE_SHUTDOWN_* settings: defaults and a bad value naming its variable."""

from __future__ import annotations

import pytest

from core.settings import SettingsError, ShutdownSettings


def test_shutdown_defaults_drain_five_seconds_then_ten_for_requests_in_flight() -> None:
    assert ShutdownSettings.from_env({}) == ShutdownSettings(drain_s=5, timeout_s=10)


def test_zero_drain_is_allowed_but_a_zero_timeout_is_refused() -> None:
    assert ShutdownSettings.from_env({"QUEUECORE_SHUTDOWN_DRAIN_S": "0"}).drain_s == 0
    with pytest.raises(SettingsError) as info:
        ShutdownSettings.from_env({"QUEUECORE_SHUTDOWN_TIMEOUT_S": "0"})
    assert info.value.variable == "QUEUECORE_SHUTDOWN_TIMEOUT_S"
