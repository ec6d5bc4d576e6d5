"""Row series to GreptimeDB: a bounded queue drained by one background thread, never blocking.

Callers (the domain and the edges) hand :class:`Row` values to :meth:`SeriesWriter.offer`, which
only appends to a bounded queue. A daemon thread groups the rows by table and sends batches with
a sender (by default ``greptimedb-ingester``'s gRPC client). When the queue is full — GreptimeDB
slow or down — rows are dropped and counted (``queuecore.series.dropped`` and a log line at most
every few seconds); a publish never waits for GreptimeDB. Without ``QUEUECORE_GREPTIMEDB_GRPC``
no writer exists: no thread, no queue.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from opentelemetry import metrics

from core.settings import GreptimeSettings

_log = logging.getLogger("queuecore.series")
_meter = metrics.get_meter("queuecore")

SERIES_DROPPED: Final = _meter.create_counter(
    "queuecore.series.dropped",
    unit="{row}",
    description="Rows for GreptimeDB dropped because the queue was full or a send failed.",
)
_DROP_LOG_INTERVAL_S = 5.0


@dataclass(frozen=True, slots=True)
class Row:
    """One row of a series table: tags (strings), fields (numbers, None when unknown) and a
    timestamp in ms."""

    table: str
    tags: Mapping[str, str]
    fields: Mapping[str, float | int | None]
    ts_ms: int


Sender = Callable[[str, Sequence[Row]], None]


class SeriesWriter:
    """A bounded queue of rows and the thread that sends them in batches."""

    def __init__(self, send: Sender, *, queue_rows: int, batch_rows: int) -> None:
        self._send = send
        self._queue: queue.Queue[Row] = queue.Queue(maxsize=queue_rows)
        self._batch_rows = batch_rows
        self._dropped = 0
        self._last_drop_log_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="greptime-series", daemon=True)
        self._thread.start()

    @property
    def dropped(self) -> int:
        """Rows dropped since start."""
        return self._dropped

    def offer(self, row: Row) -> bool:
        """Queue a row without waiting; False (and counted) when the queue is full."""
        try:
            self._queue.put_nowait(row)
            return True
        except queue.Full:
            self._drop(1, "queue full")
            return False

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop the thread after a last drain attempt bounded by ``timeout_s``."""
        self._stop.set()
        self._thread.join(timeout_s)

    def _drop(self, rows: int, reason: str) -> None:
        self._dropped += rows
        SERIES_DROPPED.add(rows, {"reason": reason})
        now_s = time.monotonic()
        if now_s - self._last_drop_log_s >= _DROP_LOG_INTERVAL_S:
            self._last_drop_log_s = now_s
            _log.warning("greptimedb rows dropped: %s (total %d)", reason, self._dropped)

    def _take_batch(self) -> list[Row]:
        try:
            batch = [self._queue.get(timeout=0.2)]
        except queue.Empty:
            return []
        while len(batch) < self._batch_rows:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return batch

    def _run(self) -> None:
        while not (self._stop.is_set() and self._queue.empty()):
            batch = self._take_batch()
            by_table: dict[str, list[Row]] = {}
            for row in batch:
                by_table.setdefault(row.table, []).append(row)
            for table, rows in by_table.items():
                try:
                    self._send(table, rows)
                except Exception as error:
                    self._drop(len(rows), f"send failed: {type(error).__name__}")


def ingester_sender(settings: GreptimeSettings) -> Sender:
    """A sender over ``greptimedb-ingester``'s gRPC client; tables are created on first write."""
    from greptimedb_ingester import Client, Column, ColumnDataType, SemanticType

    client = Client([settings.grpc_address], database=settings.database)

    def send(table: str, rows: Sequence[Row]) -> None:
        tags, fields = _column_names(rows)
        columns = [Column(name, ColumnDataType.STRING, SemanticType.TAG) for name in tags]
        columns += [Column(name, ColumnDataType.FLOAT64, SemanticType.FIELD) for name in fields]
        columns.append(Column("ts", ColumnDataType.TIMESTAMP_MILLISECOND, SemanticType.TIMESTAMP))
        values = [
            [row.tags.get(name, "") for name in tags]
            + [_float(row.fields.get(name)) for name in fields]
            + [row.ts_ms]
            for row in rows
        ]
        client.insert(table, columns=columns, rows=values)

    return send


def _column_names(rows: Sequence[Row]) -> tuple[list[str], list[str]]:
    """Tag and field names of a batch, in first-seen order (rows of a table may differ)."""
    tags: dict[str, None] = {}
    fields: dict[str, None] = {}
    for row in rows:
        tags.update(dict.fromkeys(row.tags))
        fields.update(dict.fromkeys(row.fields))
    return list(tags), list(fields)


def _float(value: float | int | None) -> float | None:
    return None if value is None else float(value)


_writer: SeriesWriter | None = None
_writer_lock = threading.Lock()


def writer(settings: GreptimeSettings) -> SeriesWriter | None:
    """This process's writer, started on first use; None (nothing paid) when switched off."""
    global _writer
    if settings.grpc_address is None:
        return None
    with _writer_lock:
        if _writer is None:
            _writer = SeriesWriter(
                ingester_sender(settings),
                queue_rows=settings.queue_rows,
                batch_rows=settings.batch_rows,
            )
        return _writer


def close_writer(timeout_s: float = 2.0) -> None:
    """Stop this process's writer after a last bounded drain (at shutdown); no-op when off."""
    global _writer
    with _writer_lock:
        current, _writer = _writer, None
    if current is not None:
        current.close(timeout_s)
