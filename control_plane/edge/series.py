"""The API process's part of the GreptimeDB series: per-producer rows (``queuecore_producers``).

Only when ``QUEUECORE_GREPTIMEDB_GRPC`` is set: the lifespan starts a :class:`ProducerSeries`
(the process's SeriesWriter, a :class:`ProducerActivity` and a task that hands its rows to the
writer every ``QUEUECORE_GREPTIMEDB_SNAPSHOT_S`` and at shutdown). The data plane feeds the
activity from each publish's accounting record (``data_plane.write.accounting``), one dict
update per partition; when the switch is off nothing is counted.
"""

from __future__ import annotations

import asyncio
import contextlib

from core.settings import GreptimeSettings
from observability import series
from observability.logging import get_logger
from observability.producers import ProducerActivity

log = get_logger("queuecore.series")


class ProducerSeries:
    """Producer activity of this process, sent to GreptimeDB periodically."""

    def __init__(self, writer: series.SeriesWriter, interval_s: float) -> None:
        self.activity = ProducerActivity()
        self._writer = writer
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def start_if_on(cls, config: GreptimeSettings) -> ProducerSeries | None:
        """Started when the switch is on; None (no writer, no task) otherwise."""
        writer = series.writer(config)
        if writer is None:
            return None
        started = cls(writer, config.snapshot_s)
        started._task = asyncio.create_task(started._run(), name="producer-series")
        return started

    def send(self) -> int:
        """Hand the rows counted so far to the writer (never waits); how many were queued."""
        return sum(self._writer.offer(row) for row in self.activity.take_rows())

    async def stop(self) -> None:
        """Send the last rows and close the writer (a bounded last drain)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.send()
        await asyncio.to_thread(series.close_writer)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                self.send()
            except Exception:
                log.exception("producer_series_failed")
