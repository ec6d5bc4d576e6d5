"""Per-phase timings of the segment writer during a benchmark phase, read from the API's log.

The API runs with ``QUEUECORE_WRITER_TIMINGS_MS`` set, so each writer logs its cumulative phase
histograms (``writer_timings`` lines, ``data_plane.write.timing``) once per interval when they
changed. A phase's figures are the difference between the last line of each process before the
phase and after it: exact counts, nothing sampled, no request to the server during the run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from data_plane.write.timing import PHASES, percentile_us, subtract

INTERVAL_MS = 250  # the API's QUEUECORE_WRITER_TIMINGS_MS during a benchmark

Snapshots = dict[int, dict[str, Any]]


def latest(log: Path) -> Snapshots:
    """The last ``writer_timings`` line of each API process in ``log``, by pid."""
    found: Snapshots = {}
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return found
    for line in lines:
        if '"writer_timings"' not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == "writer_timings":
            found[int(record.get("pid", 0))] = record
    return found


def settled(log: Path) -> Snapshots:
    """:func:`latest` once the writers have logged what they did until now."""
    time.sleep(2 * INTERVAL_MS / 1000 + 0.1)
    return latest(log)


def window(before: Snapshots, after: Snapshots) -> dict[str, Any]:
    """p50/p99 (ms) of each phase, flushes and messages between two sets of snapshots."""
    totals: dict[str, dict[int, int]] = {phase: {} for phase in PHASES}
    flushes = messages = 0
    for pid, end in after.items():
        start = before.get(pid, {})
        flushes += end["flushes"] - start.get("flushes", 0)
        messages += end["messages"] - start.get("messages", 0)
        for phase in PHASES:
            diff = subtract(_counts(end, phase), _counts(start, phase))
            for bucket, n in diff.items():
                totals[phase][bucket] = totals[phase].get(bucket, 0) + n
    out: dict[str, Any] = {"flushes": flushes, "messages_flushed": messages}
    for phase, counts in totals.items():
        for q in (50, 99):
            value = percentile_us(counts, q)
            out[f"{phase}_p{q}_ms"] = None if value is None else round(value / 1000, 3)
    out["messages_per_flush"] = round(messages / flushes, 1) if flushes else None
    return out


def _counts(snapshot: dict[str, Any], phase: str) -> dict[int, int]:
    raw = snapshot.get("histograms", {}).get(phase, {})
    return {int(bucket): int(n) for bucket, n in raw.items()}


def summary(timing: dict[str, Any]) -> str:
    """One line: p50/p99 of each phase, and messages per flush."""
    parts = [
        f"{phase} {_ms(timing.get(f'{phase}_p50_ms'))}/{_ms(timing.get(f'{phase}_p99_ms'))}"
        for phase in PHASES
    ]
    return ", ".join(parts) + f" ms (p50/p99); {timing.get('messages_per_flush')} msg/flush"


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"
