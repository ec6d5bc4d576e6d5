"""``queuecore dev`` under faults: a child that dies is restarted and the stack goes on; after
``kill -9`` of the launcher nothing holds its ports; ``QUEUECORE_DATABASE_URL`` exported for the
CLI (the dev database itself) is the embedded one, and another unreachable one is a one-line
error, never a traceback.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from infra.embedded import free_port_block, port_is_free
from tests.e2e.test_dev_stack import DevPorts, start_dev, wait_ready
from tests.support.processes import descendants, gone_within, http_status, stop, wait_for

pytestmark = pytest.mark.e2e

PORTS_FREED_WITHIN_S = 10.0  # SeaweedFS held its ports 15-18 s before it died with the launcher


def child(launcher: int, marker: str) -> psutil.Process:
    """The launcher's child whose command line contains ``marker``."""
    for proc in psutil.Process(launcher).children():
        if marker in " ".join(proc.cmdline()):
            return proc
    raise AssertionError(f"no child running {marker!r}")


def test_dev_restarts_a_dead_child_and_leaves_no_ports_after_kill_9(tmp_path: Path) -> None:
    ports, data_dir = DevPorts.pick(), tmp_path / "data"
    log = tmp_path / "dev.log"
    own_database = f"postgresql://postgres@127.0.0.1:{ports.postgres}/queuecore"
    env = {**ports.env(data_dir), "QUEUECORE_DATABASE_URL": own_database}

    dev = start_dev(env, log)
    try:
        wait_ready(dev, ports, log)
        assert "names this stack's own PostgreSQL" in log.read_text()

        # A crashed API and a crashed SeaweedFS come back; the launcher keeps running.
        api, s3 = child(dev.pid, " serve "), child(dev.pid, "weed")
        api.kill()
        s3.kill()
        wait_for(
            lambda: (
                http_status(f"http://127.0.0.1:{ports.http}/readyz") == 200
                and child(dev.pid, " serve ").pid != api.pid
                and child(dev.pid, "weed").pid != s3.pid
            ),
            120,
            "api and seaweedfs restarted",
            dev,
            log,
        )
        assert dev.poll() is None
        text = log.read_text()
        assert "api exited with code -9; restarting in" in text
        assert "seaweedfs restarted" in text

        # kill -9 of the launcher: every child goes and every port is free within seconds.
        children = descendants(dev.pid)
        dev.send_signal(signal.SIGKILL)
        dev.wait(10)
        deadline = time.monotonic() + PORTS_FREED_WITHIN_S
        needed = [ports.http, ports.postgres, ports.redis, *range(ports.s3, ports.s3 + 8)]
        while time.monotonic() < deadline and not all(port_is_free(p) for p in needed):
            time.sleep(0.2)
        held = [p for p in needed if not port_is_free(p)]
        assert not held, f"ports still held {PORTS_FREED_WITHIN_S}s after kill -9: {held}"
        # Celery's worker and beat stop warmly (SIGTERM): give them the time they take.
        survivors = gone_within(children, 30)
        assert not survivors, f"left behind after kill -9: {[p.pid for p in survivors]}"
        assert "Traceback" not in log.read_text()
    finally:
        stop(dev)


def test_an_unreachable_database_url_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    ports = DevPorts.pick()
    env = {
        **ports.env(tmp_path / "data"),
        "QUEUECORE_DATABASE_URL": f"postgresql://postgres@127.0.0.1:{free_port_block()}/nope",
    }
    result = subprocess.run(
        [sys.executable, "-m", "infra.cli", "dev"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr + result.stdout
    assert "cannot reach the database of QUEUECORE_DATABASE_URL" in result.stderr
    assert "unset it to use the embedded PostgreSQL" in result.stderr
