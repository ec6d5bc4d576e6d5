"""Where a publish's time goes: per-flush monotonic stamps and log-linear phase histograms.

Each flush carries one :class:`FlushClock` (five ``time.monotonic()`` stamps per flush, not per
message): the first of its publishes queued, the flush started, the PUT done (encoding
included), the commit done, the answers handed back (futures resolved). Each publish adds one
more stamp when its handler resumes, which gives the event loop's lag. :class:`PhaseTimings`
keeps cumulative histograms of the phases; with ``QUEUECORE_WRITER_TIMINGS_S`` set, the writer
logs them as one ``writer_timings`` line per interval (only when something changed), and a
reader of the log (``benchmarks/phases.py``) subtracts two lines to get any window's
percentiles. Cumulative counts keep the lines cheap to make and exact to subtract.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

PHASES = ("queue_wait", "put", "commit", "answer", "loop_lag")
"""queue_wait: first publish queued → flush started; put: encoding and the S3 PUT; commit: the
offset commit; answer: placements assigned and futures resolved; loop_lag: futures resolved →
each handler running again (one sample per publish)."""

_STEPS_PER_DOUBLING = 8  # buckets ~9 % wide: finer than the run-to-run noise
_LOG2_STEP = 1 / _STEPS_PER_DOUBLING


def bucket_of(us: float) -> int:
    """The histogram bucket of a duration in µs (0 holds everything under 1 µs)."""
    if us < 1:
        return 0
    return int(math.log2(us) * _STEPS_PER_DOUBLING) + 1


def bucket_upper_us(bucket: int) -> float:
    """The upper bound, in µs, of ``bucket``."""
    return 1.0 if bucket <= 0 else 2 ** (bucket * _LOG2_STEP)


def percentile_us(counts: dict[int, int], q: float) -> float | None:
    """The ``q``-th percentile (0-100) of a histogram, as its bucket's upper bound in µs."""
    total = sum(counts.values())
    if total <= 0:
        return None
    rank = max(1, math.ceil(total * q / 100))
    seen = 0
    for bucket in sorted(counts):
        seen += counts[bucket]
        if seen >= rank:
            return bucket_upper_us(bucket)
    return bucket_upper_us(max(counts))


def subtract(after: dict[int, int], before: dict[int, int]) -> dict[int, int]:
    """The samples ``after`` holds that ``before`` did not (both cumulative)."""
    diff = {b: n - before.get(b, 0) for b, n in after.items()}
    return {b: n for b, n in diff.items() if n > 0}


class FlushClock:
    """The monotonic stamps (seconds) of one flush."""

    __slots__ = ("answered_s", "committed_s", "put_done_s", "queued_s", "started_s")

    def __init__(self, queued_s: float, started_s: float) -> None:
        self.queued_s = queued_s
        self.started_s = started_s
        self.put_done_s = started_s
        self.committed_s = started_s
        self.answered_s = started_s

    def phases_s(self) -> tuple[float, float, float, float]:
        """Queue wait, PUT, commit and answer of this flush, in seconds."""
        return (
            self.started_s - self.queued_s,
            self.put_done_s - self.started_s,
            self.committed_s - self.put_done_s,
            self.answered_s - self.committed_s,
        )


@dataclass
class PhaseTimings:
    """Cumulative histograms (bucket → count) of each phase, plus flush and message counts."""

    histograms: dict[str, dict[int, int]] = field(
        default_factory=lambda: {phase: {} for phase in PHASES}
    )
    flushes: int = 0
    messages: int = 0
    changed: bool = False

    def flushed(self, clock: FlushClock, messages: int) -> None:
        """Record a committed flush of ``messages`` messages."""
        for phase, seconds in zip(PHASES, clock.phases_s(), strict=False):
            _add(self.histograms[phase], seconds)
        self.flushes += 1
        self.messages += messages
        self.changed = True

    def resumed(self, lag_s: float) -> None:
        """Record one handler resuming ``lag_s`` after its answer was handed back."""
        _add(self.histograms["loop_lag"], lag_s)

    def snapshot(self) -> dict[str, Any]:
        """The cumulative counts, as a log line carries them (bucket keys as strings)."""
        self.changed = False
        return {
            "flushes": self.flushes,
            "messages": self.messages,
            "histograms": {
                phase: {str(b): n for b, n in counts.items()}
                for phase, counts in self.histograms.items()
            },
        }


def _add(counts: dict[int, int], seconds: float) -> None:
    bucket = bucket_of(seconds * 1e6)
    counts[bucket] = counts.get(bucket, 0) + 1
