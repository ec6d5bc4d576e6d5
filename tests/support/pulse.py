"""The API's pulse, beaten from a test thread where no API replica runs against a database.

Members are evicted only for silence while the pulse runs (``data_plane.groups.pulse``), so a
test that calls the group services directly beats it as a replica would.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from data_plane.groups import pulse


def _beat_until(url: str, stop: threading.Event) -> None:
    async def once() -> None:
        async with await AsyncConnection.connect(
            url, autocommit=True, connect_timeout=1, row_factory=dict_row
        ) as conn:
            await asyncio.wait_for(pulse.beat(conn), 1.0)

    while not stop.is_set():
        with contextlib.suppress(Exception):  # a failed beat is a gap, as in a replica
            asyncio.run(once())
        stop.wait(pulse.PULSE_S)


@contextlib.contextmanager
def pulsing(url: str) -> Iterator[None]:
    """Beat every ``PULSE_S`` over a fresh connection while the block runs."""
    stop = threading.Event()
    beating = threading.Thread(target=_beat_until, args=(url, stop), daemon=True)
    beating.start()
    time.sleep(2 * pulse.PULSE_S)  # a pulse landed: silence counts from here
    try:
        yield
    finally:
        stop.set()
        beating.join(5)
