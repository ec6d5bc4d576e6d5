"""Failing open on a Redis outage: skip, probe once, warn rarely, say when it is over."""

from __future__ import annotations

from typing import Any

from core.redis_outage import WARN_EVERY_S, RedisOutage


class Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))

    def info(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))


def test_after_a_failure_calls_skip_redis_then_one_probes_it() -> None:
    now = [100.0]
    log = Log()
    outage = RedisOutage("limiter", "memory", log, retry_s=5.0, clock=lambda: now[0])
    assert not outage.skip()
    outage.failed(TimeoutError())
    assert outage.skip()
    now[0] += 5.0
    assert not outage.skip()  # this call probes
    assert outage.skip()  # the others keep skipping while it runs
    outage.failed(ConnectionError("refused"))  # the probe failed too
    now[0] += 4.9
    assert outage.skip()
    now[0] += 0.1
    assert not outage.skip()
    assert outage.recovered()
    assert not outage.skip() and not outage.recovered()
    assert [e for e, _ in log.events] == ["limiter_redis_unavailable", "limiter_redis_recovered"]
    assert log.events[0][1]["fallback"] == "memory"


def test_a_flapping_redis_is_reported_at_most_every_warning_interval() -> None:
    now = [0.0]
    log = Log()
    outage = RedisOutage("limiter", "memory", log, retry_s=1.0, clock=lambda: now[0])
    for _ in range(10):
        outage.failed(OSError("down"))
        now[0] += WARN_EVERY_S / 5
    warnings = [e for e, _ in log.events if e.endswith("unavailable")]
    assert len(warnings) == 2  # at 0 s and at WARN_EVERY_S
