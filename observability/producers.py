"""Per-producer activity of one API process, for the ``queuecore_producers`` series.

A publish adds to an in-memory dict keyed by (tenant, topic, API key id, partition): the last
offset, the message count and the time — no I/O, no lock (the event loop is the only caller).
A background task of the API process (control_plane.edge.resources) takes the counts every
``QUEUECORE_GREPTIMEDB_SNAPSHOT_S`` and at shutdown and hands them to the SeriesWriter, so
nothing about GreptimeDB is on the request path. Exists only when the GreptimeDB switch is on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

from observability.series import Row
from observability.series_rows import PRODUCERS

_LAST_OFFSET, _MESSAGES, _LAST_MS = range(3)


class ProducerKey(NamedTuple):
    """Who produced where: the tenant, the topic, the API key id and the partition."""

    organisation: str
    project: str
    environment: str
    topic: str
    producer: str
    partition: int


class ProducerActivity:
    """Counts since the last snapshot, by :class:`ProducerKey`."""

    def __init__(self, clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000) -> None:
        self._clock_ms = clock_ms
        self._counts: dict[ProducerKey, list[int]] = {}

    def published(self, key: ProducerKey, offset: int, messages: int = 1) -> None:
        """``messages`` stored by ``key``'s producer, the last at ``offset``."""
        entry = self._counts.get(key)
        if entry is None:
            entry = self._counts[key] = [offset, 0, 0]
        entry[_LAST_OFFSET] = max(entry[_LAST_OFFSET], offset)
        entry[_MESSAGES] += messages
        entry[_LAST_MS] = self._clock_ms()

    def take_rows(self) -> list[Row]:
        """``queuecore_producers`` rows of the counts so far; the counts start again from zero."""
        taken, self._counts = self._counts, {}
        at_ms = self._clock_ms()
        return [
            Row(
                PRODUCERS,
                {**key._asdict(), "partition": str(key.partition)},
                {
                    "last_offset": entry[_LAST_OFFSET],
                    "messages": entry[_MESSAGES],
                    "last_activity_ms": entry[_LAST_MS],
                },
                at_ms,
            )
            for key, entry in taken.items()
        ]
