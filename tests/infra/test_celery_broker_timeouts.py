"""A task send to a frozen Redis fails within a bound instead of holding its thread for ever."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from core import settings, worker
from infra.embedded import EmbeddedRedis, free_port_block

# Two connection attempts of 5 s plus the publish retries' pauses, with room for a slow machine.
BOUND_S = 30


@pytest.fixture
def frozen_redis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedRedis]:
    """A private Redis that accepts connections at the kernel but never answers (SIGSTOP)."""
    server = EmbeddedRedis(tmp_path / "redis", tmp_path / "logs", free_port_block())
    server.start()
    monkeypatch.setenv("QUEUECORE_REDIS_URL", server.url)
    settings.clear_caches()
    worker.producer.cache_clear()
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        yield server
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
        server.stop()
        worker.producer.cache_clear()
        settings.clear_caches()


def test_sending_a_task_to_a_frozen_redis_fails_within_its_bound(
    frozen_redis: EmbeddedRedis,
) -> None:
    outcome: list[BaseException | None] = []

    def send() -> None:
        try:
            worker.send_task("data_plane.delete_topic_data", kwargs={"topic_id": "t"})
            outcome.append(None)
        except Exception as exc:  # kombu's OperationalError or a socket timeout
            outcome.append(exc)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    sender.join(BOUND_S)
    assert not sender.is_alive(), f"the send still waits on the frozen Redis after {BOUND_S} s"
    assert outcome and outcome[0] is not None  # it failed: nothing claims the task was queued
