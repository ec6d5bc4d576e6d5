"""Garbage-collector settings for a long-running server process.

CPython's cyclic collector walks every tracked object of a generation it collects. In an API
process that is mostly start-up state (modules, the Litestar app, botocore's service models:
~140,000 objects) that never becomes garbage, and a full collection over it took 60-100 ms on
the benchmark machine: a latency spike for every request in flight. And with the default
threshold of 700 allocations, objects of requests still in flight (a batch of 1,000 messages
makes several thousand) were promoted to older generations and triggered more full collections.
"""

from __future__ import annotations

import gc

# Young-generation threshold: allocations between collections. Requests' objects die young.
YOUNG_THRESHOLD = 20_000


def freeze_startup_heap() -> None:
    """Move what start-up allocated out of every later collection; collect young less often.

    Frozen objects are still freed by reference counting; only cycles among them are never
    found, and start-up state lives as long as the process anyway.
    """
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
