"""The API worker's collector settings: start-up state frozen, young collections less often."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from core.gc_tuning import YOUNG_THRESHOLD, freeze_startup_heap


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_start_up_objects_leave_the_collected_generations(restored_gc: None) -> None:
    survivor = [{"start-up": "state"}]  # tracked: a list holding a dict
    freeze_startup_heap()
    assert gc.get_freeze_count() > 0
    assert all(survivor is not o for g in range(3) for o in gc.get_objects(g))
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD
