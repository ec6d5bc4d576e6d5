"""``queuecore serve`` and ``queuecore beat`` against services given by URL."""

from __future__ import annotations

import signal
from pathlib import Path

import psutil
import pytest

from infra.embedded import free_port_block
from tests.support.processes import descendants, gone_within, http_status, queuecore, stop, wait_for
from tests.support.services import Services

pytestmark = pytest.mark.e2e


def test_serve_runs_several_workers_and_stops_on_sigterm(
    services: Services, tmp_path: Path
) -> None:
    port, log = free_port_block(), tmp_path / "serve.log"
    env = {**services.env(), "QUEUECORE_HTTP_PORT": str(port), "QUEUECORE_HTTP_WORKERS": "2"}
    proc = queuecore(["serve"], env, log)
    try:
        wait_for(
            lambda: http_status(f"http://127.0.0.1:{port}/readyz") == 200,
            60,
            "serve ready",
            proc,
            log,
        )
        workers = [
            p
            for p in descendants(proc.pid)
            if "multiprocessing" in " ".join(p.cmdline()) or p.name().startswith("python")
        ]
        assert len(workers) >= 2, [p.cmdline() for p in descendants(proc.pid)]
        children = descendants(proc.pid)
    finally:
        code = stop(proc, signal.SIGTERM, timeout_s=30)
    assert code == 0
    survivors = gone_within(children, 10)
    assert not survivors, [p.cmdline() for p in survivors]


def test_beat_starts_against_redis(services: Services, tmp_path: Path) -> None:
    log = tmp_path / "beat.log"
    proc = queuecore(["beat", "--schedule", str(tmp_path / "schedule")], services.env(), log)
    try:
        wait_for(
            lambda: "beat: Starting" in log.read_text(errors="replace"),
            60,
            "beat started",
            proc,
            log,
        )
        assert psutil.Process(proc.pid).is_running()
    finally:
        stop(proc)
