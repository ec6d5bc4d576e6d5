"""Latency triage: publishes slower than ``QUEUECORE_TRIAGE_SLOW_MS``, with where the time went.

A publish whose handler resumed more than the threshold after it was queued is recorded with its
phases (``data_plane.write.timing``): queue wait (for its flush to start), PUT (encoding and
the S3 PUT), commit, answer (placements assigned, futures resolved) and loop lag (the event
loop's delay in resuming the handler), and ``cause``, the longest of them. Each record is one
``slow_publish`` log line and, when the GreptimeDB series writer is on, one row of
``queuecore_slow_publishes``. At most ``QUEUECORE_TRIAGE_MAX_PER_S`` records per second per
process; the ones over the limit are counted in the next record's ``suppressed``. With the
threshold at 0 or unset there is no triage object at all (the writer checks for ``None``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol, Self

from core.settings import GreptimeSettings, TriageSettings
from data_plane.write.timing import PHASES
from observability import series
from observability.logging import get_logger
from observability.series import Row, SeriesWriter

if TYPE_CHECKING:
    from data_plane.write.timing import FlushClock

log = get_logger("queuecore.triage")


class TopicTarget(Protocol):
    """What triage tags a slow publish with (the writer's target of a topic has it)."""

    @property
    def name(self) -> str: ...
    @property
    def latency_class(self) -> str: ...
    @property
    def organisation_id(self) -> str: ...
    @property
    def project_id(self) -> str: ...
    @property
    def environment_id(self) -> str: ...


TABLE = "queuecore_slow_publishes"
CAUSES = PHASES  # queue_wait, put, commit, answer, loop_lag


class SlowPublishTriage:
    """Records publishes slower than a threshold, at most ``max_per_s`` a second."""

    def __init__(self, slow_ms: int, max_per_s: int, rows: SeriesWriter | None = None) -> None:
        self.slow_s = slow_ms / 1000
        self.max_per_s = max_per_s
        self.rows = rows
        self.recorded = 0
        self.suppressed = 0
        self._window_s = 0.0
        self._in_window = 0

    @classmethod
    def from_settings(cls, config: TriageSettings, greptime: GreptimeSettings) -> Self | None:
        """The process's triage, or None when the threshold is 0 or unset (nothing is paid)."""
        if config.slow_ms <= 0:
            return None
        return cls(config.slow_ms, config.max_per_s, series.writer(greptime))

    def observe(
        self,
        topic: TopicTarget,
        partition: str,
        messages: int,
        queued_s: float,
        clock: FlushClock,
        resumed_s: float,
    ) -> None:
        """Record the publish if it was slow and the per-second budget allows."""
        total_s = resumed_s - queued_s
        if total_s < self.slow_s or not self._admit(resumed_s):
            return
        phases_ms = _phases_ms(queued_s, clock, resumed_s)
        cause = max(phases_ms, key=phases_ms.__getitem__)
        tags = _tags(topic, partition, cause)
        fields = {
            "total_ms": round(total_s * 1000, 3),
            **{f"{name}_ms": value for name, value in phases_ms.items()},
            "messages": messages,
        }
        self._record("slow_publish", TABLE, tags, fields)

    def _admit(self, now_s: float) -> bool:
        """Whether this second's budget has room; counts the ones it has not."""
        if now_s - self._window_s >= 1.0:
            self._window_s, self._in_window = now_s, 0
        if self._in_window >= self.max_per_s:
            self.suppressed += 1
            return False
        self._in_window += 1
        return True

    def _record(
        self, event: str, table: str, tags: dict[str, str], fields: dict[str, float]
    ) -> None:
        """One log line and, with the series writer on, one row; the suppressed count restarts."""
        fields = {**fields, "suppressed": self.suppressed}
        log.warning(event, **tags, **fields)
        if self.rows is not None:
            self.rows.offer(Row(table, tags, fields, time.time_ns() // 1_000_000))
        self.recorded += 1
        self.suppressed = 0


def _phases_ms(queued_s: float, clock: FlushClock, resumed_s: float) -> dict[str, float]:
    """This publish's own queue wait, then its flush's phases, then its loop lag, in ms."""
    spans = (
        clock.started_s - queued_s,
        clock.put_done_s - clock.started_s,
        clock.committed_s - clock.put_done_s,
        clock.answered_s - clock.committed_s,
        resumed_s - clock.answered_s,
    )
    return {name: round(max(0.0, s) * 1000, 3) for name, s in zip(CAUSES, spans, strict=True)}


def _tags(topic: TopicTarget, partition: str, cause: str) -> dict[str, str]:
    return {
        "organisation": topic.organisation_id,
        "project": topic.project_id,
        "environment": topic.environment_id,
        "topic": topic.name,
        "partition": partition,
        "class": topic.latency_class,
        "cause": cause,
    }
