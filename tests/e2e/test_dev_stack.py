"""``queuecore dev`` as a user runs it: up, ready, Celery, kill -9, restart with data, clean stop."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
import redis

from core.object_store import s3_client
from infra.embedded import free_port_block
from tests.support.processes import alive, descendants, gone_within, http_status, stop, wait_for

pytestmark = pytest.mark.e2e


@dataclass
class DevPorts:
    """Free ports for one ``queuecore dev``."""

    http: int
    postgres: int
    redis: int
    s3: int
    smtp: int

    @classmethod
    def pick(cls) -> DevPorts:
        return cls(
            free_port_block(),
            free_port_block(),
            free_port_block(),
            free_port_block(8),
            free_port_block(),
        )

    @classmethod
    def pick_with_squatter(cls, service: str) -> tuple[DevPorts, socket.socket]:
        """Free ports and a socket listening on ``service``'s port, so that port is taken.

        Picking a port and binding it later races the other test workers (and TIME_WAIT), so
        the squatter binds while picking and a taken port means picking again.
        """
        for _ in range(50):
            ports = cls.pick()
            squatter = socket.socket()
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                squatter.bind(("127.0.0.1", getattr(ports, service)))
                squatter.listen()
            except OSError:
                squatter.close()
                continue
            return ports, squatter
        raise RuntimeError(f"no free port to squat for {service}")

    def env(self, data_dir: Path) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("QUEUECORE_")}
        return {
            **base,
            "QUEUECORE_DATA_DIR": str(data_dir),
            "QUEUECORE_HTTP_PORT": str(self.http),
            "QUEUECORE_DEV_POSTGRES_PORT": str(self.postgres),
            "QUEUECORE_DEV_REDIS_PORT": str(self.redis),
            "QUEUECORE_DEV_S3_PORT": str(self.s3),
            "QUEUECORE_DEV_SMTP_PORT": str(self.smtp),
            "PYTHONUNBUFFERED": "1",
        }


def start_dev(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "infra.cli", "dev"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def wait_ready(proc: subprocess.Popen[bytes], ports: DevPorts, log: Path) -> None:
    wait_for(
        lambda: (
            "QueueCore is running" in log.read_text()
            and http_status(f"http://127.0.0.1:{ports.http}/readyz") == 200
        ),
        180,
        "queuecore dev ready",
        proc,
        log,
    )


def celery_round_trip(ports: DevPorts) -> dict[str, object]:
    """Send the ping task through the dev stack's Redis to its worker, from a separate process."""
    code = "from infra.celery_app import celery_app; import sys; print(celery_app().send_task('queuecore.ping', args=[sys.argv[1]]).get(timeout=60))"
    env = {**os.environ, "QUEUECORE_REDIS_URL": f"redis://127.0.0.1:{ports.redis}/0"}
    token = secrets.token_hex(6)
    result = subprocess.run(
        [sys.executable, "-c", code, token], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert token in result.stdout
    return {"token": token}


def write_marker(ports: DevPorts, marker: str) -> None:
    with psycopg.connect(
        f"postgresql://postgres@127.0.0.1:{ports.postgres}/queuecore", autocommit=True
    ) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS e2e_markers (marker text PRIMARY KEY)")
        conn.execute("INSERT INTO e2e_markers VALUES (%s)", (marker,))
    s3_client(f"http://127.0.0.1:{ports.s3}", None, None, "us-east-1").put_object(
        Bucket="queuecore", Key=f"e2e/{marker}", Body=marker.encode()
    )
    redis.Redis(port=ports.redis).set(f"e2e:{marker}", marker)


def read_marker(ports: DevPorts, marker: str) -> tuple[bool, bytes, bytes | None]:
    with psycopg.connect(f"postgresql://postgres@127.0.0.1:{ports.postgres}/queuecore") as conn:
        in_pg = (
            conn.execute("SELECT 1 FROM e2e_markers WHERE marker = %s", (marker,)).fetchone()
            is not None
        )
    body = (
        s3_client(f"http://127.0.0.1:{ports.s3}", None, None, "us-east-1")
        .get_object(Bucket="queuecore", Key=f"e2e/{marker}")["Body"]
        .read()
    )
    return in_pg, body, redis.Redis(port=ports.redis).get(f"e2e:{marker}")


def test_dev_stack_lifecycle(tmp_path: Path) -> None:
    ports, data_dir = DevPorts.pick(), tmp_path / "data"
    env, log = ports.env(data_dir), tmp_path / "dev.log"

    first = start_dev(env, log)
    try:
        wait_ready(first, ports, log)
        assert f"http://127.0.0.1:{ports.http}" in log.read_text()
        celery_round_trip(ports)
        write_marker(ports, "before-crash")

        # A second launcher on the same data directory refuses, and does not disturb the first.
        second = subprocess.run(
            [sys.executable, "-m", "infra.cli", "dev"],
            env={**env, "QUEUECORE_HTTP_PORT": str(free_port_block())},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1
        assert "already running" in second.stderr and str(data_dir) in second.stderr
        assert http_status(f"http://127.0.0.1:{ports.http}/readyz") == 200

        # The pusher runs, with a secrets key made once and kept for the next start.
        pusher_log = data_dir / "logs" / "pusher.log"
        wait_for(
            lambda: pusher_log.exists() and "pusher_started" in pusher_log.read_text(),
            60,
            "the dev pusher",
        )
        key = (data_dir / "secrets.key").read_text()
        assert len(key) >= 32 and (data_dir / "secrets.key").stat().st_mode & 0o077 == 0

        # kill -9 the launcher: its children die with it, and a new launcher starts cleanly.
        children = descendants(first.pid)
        assert len(children) >= 7
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        stop(first)

    restarted = start_dev(env, log)
    try:
        wait_ready(restarted, ports, log)
        deadline = time.monotonic() + 30
        while alive(children) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(children), f"left behind after kill -9: {[p.pid for p in alive(children)]}"
        assert read_marker(ports, "before-crash") == (True, b"before-crash", b"before-crash")
        assert (data_dir / "secrets.key").read_text() == key  # sealed push secrets still open
        celery_round_trip(ports)

        # SIGTERM stops every child and exits 0.
        children = descendants(restarted.pid)
        assert stop(restarted, signal.SIGTERM, timeout_s=60) == 0
        survivors = gone_within(children, 10)
        assert not survivors, f"survived SIGTERM: {[p.pid for p in survivors]}"
        assert http_status(f"http://127.0.0.1:{ports.http}/healthz") is None
    finally:
        stop(restarted)


def test_port_taken_is_a_clear_error_not_a_hang(tmp_path: Path) -> None:
    ports, squatter = DevPorts.pick_with_squatter("http")
    with squatter:
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "infra.cli", "dev"],
            env=ports.env(tmp_path / "data"),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 1
    assert f"port {ports.http}" in result.stderr and "QUEUECORE_HTTP_PORT" in result.stderr
    assert time.monotonic() - started < 60


def test_embedded_service_port_taken_names_its_setting(tmp_path: Path) -> None:
    ports, squatter = DevPorts.pick_with_squatter("redis")
    with squatter:
        result = subprocess.run(
            [sys.executable, "-m", "infra.cli", "dev"],
            env=ports.env(tmp_path / "data"),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 1
    assert "QUEUECORE_DEV_REDIS_PORT" in result.stderr
