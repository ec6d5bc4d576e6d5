"""The reference cost of one durable flush on this machine: one S3 PUT + one commit + linger.

Measured on the run's own SeaweedFS and PostgreSQL, so the express-latency target scales with
the machine the benchmark runs on instead of being a fixed number of milliseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil
import psycopg

from core.object_store import ensure_bucket
from core.s3_http import Credentials, Endpoint, S3HttpClient, SigV4Signer

REFERENCE_BUCKET = "bench-reference"  # apart from QueueCore's bucket, so PUT counts stay exact
DEFAULT_LINGER_MS = 5.0
OBJECT_BYTES = 1024


@dataclass(frozen=True)
class Reference:
    """Median PUT and commit times, the express linger, and where the linger came from."""

    put_p50_ms: float
    put_p99_ms: float
    commit_p50_ms: float
    commit_p99_ms: float
    linger_ms: float
    linger_source: str

    @property
    def flush_ms(self) -> float:
        """One S3 PUT + one commit + linger."""
        return self.put_p50_ms + self.commit_p50_ms + self.linger_ms

    def as_dict(self) -> dict[str, Any]:
        """Plain values for the JSON report."""
        return {
            "put_p50_ms": round(self.put_p50_ms, 3),
            "put_p99_ms": round(self.put_p99_ms, 3),
            "commit_p50_ms": round(self.commit_p50_ms, 3),
            "commit_p99_ms": round(self.commit_p99_ms, 3),
            "linger_ms": self.linger_ms,
            "linger_source": self.linger_source,
            "flush_ms": round(self.flush_ms, 3),
        }


def measure(s3_endpoint: str, database_url: str, samples: int = 200) -> Reference:
    """Time ``samples`` 1 KiB PUTs and ``samples`` INSERT+COMMITs (after a short warm-up)."""
    puts = _time_puts(s3_endpoint, samples)
    commits = _time_commits(database_url, samples)
    linger_ms, source = express_linger()
    return Reference(
        _pct(puts, 50), _pct(puts, 99), _pct(commits, 50), _pct(commits, 99), linger_ms, source
    )


def express_linger() -> tuple[float, str]:
    """The express linger the API process uses: its setting, else the writer's default."""
    raw = os.environ.get("QUEUECORE_WRITER_LINGER_MS")
    if raw:
        return float(raw), "QUEUECORE_WRITER_LINGER_MS"
    try:
        from data_plane.write.writer import WriterSettings
    except ImportError:
        return (
            DEFAULT_LINGER_MS,
            f"assumed {DEFAULT_LINGER_MS:g} ms (data_plane.write.writer missing)",
        )
    return float(WriterSettings.from_env().linger_ms), "data_plane.write.writer default"


def standard_linger() -> float | None:
    """The standard-class linger of the writer, when the writer exists."""
    try:
        from data_plane.write.writer import WriterSettings
    except ImportError:
        return None
    return float(WriterSettings.from_env().standard_linger_ms)


def _time_puts(endpoint: str, samples: int) -> list[float]:
    """PUTs through the client the segment writer uses (``core.s3_http``), one at a time."""
    ensure_bucket(endpoint, REFERENCE_BUCKET, None, None, "us-east-1")
    client = _client(endpoint)
    body = secrets.token_bytes(OBJECT_BYTES)
    loop = asyncio.new_event_loop()

    def put(index: int) -> None:
        loop.run_until_complete(client.put_object(REFERENCE_BUCKET, f"reference/{index}", body))

    try:
        return _timed(put, samples)
    finally:
        client.close()
        loop.close()


def _time_commits(database_url: str, samples: int) -> list[float]:
    with psycopg.connect(database_url) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_reference (id bigserial, body text)")
        conn.commit()
        body = "x" * 100

        def insert(_: int) -> None:
            conn.execute("INSERT INTO bench_reference (body) VALUES (%s)", (body,))
            conn.commit()

        timings = _timed(insert, samples)
        conn.execute("DROP TABLE bench_reference")
        conn.commit()
    return timings


def _timed(operation: Callable[[int], None], samples: int, warmup: int = 20) -> list[float]:
    for index in range(warmup):
        operation(-index - 1)
    timings = []
    for index in range(samples):
        began = time.perf_counter()
        operation(index)
        timings.append((time.perf_counter() - began) * 1000)
    return timings


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))]


INGEST_OBJECT_BYTES = 256 * 1024  # about what a batched flush writes
INGEST_IN_FLIGHT = 4  # enough PUTs at once to keep SeaweedFS busy on every core here


def object_store_ingest(endpoint: str, server_pid: int, seconds: float = 2.0) -> dict[str, Any]:
    """What the object store alone can take on this machine, and its CPU per MB.

    :data:`INGEST_IN_FLIGHT` PUTs of :data:`INGEST_OBJECT_BYTES` at a time for ``seconds``,
    through the writer's client, with nothing else running. The server's CPU per MB bounds any
    durable publish path that stores every byte there, whatever the API costs: a rate R MB/s
    needs R x that much of the machine's cores for the object store alone.
    """
    ensure_bucket(endpoint, REFERENCE_BUCKET, None, None, "us-east-1")
    body = secrets.token_bytes(INGEST_OBJECT_BYTES)
    server = psutil.Process(server_pid)

    def server_cpu_s() -> float:
        total = 0.0
        for proc in (server, *server.children(recursive=True)):
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                total += times.user + times.system
        return total

    async def run() -> int:
        clients = [_client(endpoint) for _ in range(INGEST_IN_FLIGHT)]
        stored = 0
        deadline = time.monotonic() + seconds

        async def writer(number: int, client: S3HttpClient) -> None:
            nonlocal stored
            index = 0
            while time.monotonic() < deadline:
                await client.put_object(REFERENCE_BUCKET, f"ingest/{number}/{index}", body)
                index += 1
                stored += len(body)

        try:
            await asyncio.gather(*(writer(n, c) for n, c in enumerate(clients)))
        finally:
            for client in clients:
                client.close()
        return stored

    cpu_before, began = server_cpu_s(), time.monotonic()
    stored = asyncio.run(run())
    wall_s, cpu_s = time.monotonic() - began, server_cpu_s() - cpu_before
    megabytes = stored / 1e6
    return {
        "mb_per_s": round(megabytes / wall_s, 1),
        "object_bytes": INGEST_OBJECT_BYTES,
        "in_flight": INGEST_IN_FLIGHT,
        "server_cpu_ms_per_mb": round(cpu_s * 1000 / megabytes, 2) if megabytes else None,
        "server_cores_used": round(cpu_s / wall_s, 2),
    }


def _client(endpoint: str) -> S3HttpClient:
    return S3HttpClient(
        Endpoint.parse(endpoint, "us-east-1"),
        SigV4Signer("us-east-1", lambda: Credentials("queuecore", "queuecore")),
    )
