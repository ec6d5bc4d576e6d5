"""The GreptimeDB row writer: off by default, never blocks, drops and counts when the sink stalls."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from core.settings import GreptimeSettings, SettingsError
from observability.series import Row, SeriesWriter, ingester_sender, writer


def _row(n: int) -> Row:
    return Row("producer_activity", {"topic": "orders", "producer": "key-1"}, {"offset": n}, n)


def test_switched_off_means_no_writer() -> None:
    assert writer(GreptimeSettings.from_env({})) is None


def test_address_must_be_host_port() -> None:
    try:
        GreptimeSettings.from_env({"QUEUECORE_GREPTIMEDB_GRPC": "http://x"})
    except SettingsError as error:
        assert "QUEUECORE_GREPTIMEDB_GRPC" in str(error)
    else:
        raise AssertionError("a URL was accepted as host:port")


def test_rows_arrive_grouped_by_table_in_batches() -> None:
    got: list[tuple[str, list[int]]] = []
    done = threading.Event()

    def send(table: str, rows: Sequence[Row]) -> None:
        got.append((table, [int(r.fields["offset"] or 0) for r in rows]))
        if sum(len(o) for _, o in got) == 5:
            done.set()

    series = SeriesWriter(send, queue_rows=100, batch_rows=10)
    for n in range(5):
        assert series.offer(_row(n))
    assert done.wait(5)
    series.close()
    assert [o for _, offsets in got for o in offsets] == [0, 1, 2, 3, 4]
    assert {table for table, _ in got} == {"producer_activity"}


def test_a_stalled_greptimedb_never_blocks_offer_and_drops_are_counted() -> None:
    release = threading.Event()

    def stalled(table: str, rows: Sequence[Row]) -> None:
        release.wait(10)

    series = SeriesWriter(stalled, queue_rows=10, batch_rows=1)
    started_s = time.monotonic()
    accepted = sum(series.offer(_row(n)) for n in range(1000))
    elapsed_s = time.monotonic() - started_s
    release.set()
    series.close()
    assert elapsed_s < 0.5
    assert accepted <= 11
    assert series.dropped == 1000 - accepted


def test_a_failing_send_drops_and_counts() -> None:
    def refused(table: str, rows: Sequence[Row]) -> None:
        raise ConnectionRefusedError("127.0.0.1:1")

    series = SeriesWriter(refused, queue_rows=100, batch_rows=100)
    for n in range(3):
        series.offer(_row(n))
    deadline_s = time.monotonic() + 5
    while series.dropped < 3 and time.monotonic() < deadline_s:
        time.sleep(0.05)
    series.close()
    assert series.dropped == 3


def test_an_unreachable_greptimedb_through_the_real_ingester_drops_and_counts() -> None:
    settings = GreptimeSettings.from_env({"QUEUECORE_GREPTIMEDB_GRPC": "127.0.0.1:1"})
    series = SeriesWriter(ingester_sender(settings), queue_rows=100, batch_rows=100)
    started_s = time.monotonic()
    for n in range(20):
        assert series.offer(_row(n))
    assert time.monotonic() - started_s < 0.5
    deadline_s = time.monotonic() + 10
    while series.dropped < 20 and time.monotonic() < deadline_s:
        time.sleep(0.05)
    series.close()
    assert series.dropped == 20
