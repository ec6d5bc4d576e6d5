"""A private QueueCore stack for one benchmark run: embedded services, the API, a tenant.

Everything lives under one temporary directory and binds 127.0.0.1 on free ports, so a run never
touches a developer's ``.queuecore/`` or another run. :meth:`Stack.stop` stops what it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import httpx
import psutil
import psycopg
from psycopg.rows import dict_row

from benchmarks import phases
from core.object_store import s3_client
from infra import migrate
from infra.embedded import (
    HOST,
    EmbeddedPostgres,
    EmbeddedRedis,
    EmbeddedS3,
    EmbeddedService,
    die_with_parent,
    free_port_block,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
BUCKET = "queuecore-bench"
STORED_MESSAGES = """
    SELECT coalesce(sum(b.count), 0) FROM segment_blocks b JOIN topics t ON t.id = b.topic_id
    WHERE t.name = %s
"""
# Enterprise custom limits high enough that the rate limiter never answers 429 in a run.
UNLIMITED = {"publish_per_s": 1_000_000, "admin_per_s": 100_000, "consume_per_s": 1_000_000}


@dataclass
class Stack:
    """Embedded PostgreSQL, SeaweedFS S3 and Redis plus one ``queuecore serve`` process tree."""

    root: Path
    workers: int
    repo_root: Path = REPO_ROOT  # the build whose ``queuecore serve`` runs (A/B: another worktree)
    services: list[EmbeddedService] = field(default_factory=list)
    serve: subprocess.Popen[bytes] | None = None
    http_port: int = 0
    api_key: str = ""

    @property
    def postgres(self) -> EmbeddedPostgres:
        """The embedded PostgreSQL."""
        return next(s for s in self.services if isinstance(s, EmbeddedPostgres))

    @property
    def s3(self) -> EmbeddedS3:
        """The embedded S3 server."""
        return next(s for s in self.services if isinstance(s, EmbeddedS3))

    @property
    def redis(self) -> EmbeddedRedis:
        """The embedded Redis."""
        return next(s for s in self.services if isinstance(s, EmbeddedRedis))

    @property
    def base_url(self) -> str:
        """Where the API listens."""
        return f"http://{HOST}:{self.http_port}"

    @property
    def serve_log(self) -> Path:
        """Output of ``queuecore serve``."""
        return self.root / "logs" / "serve.log"

    def start_services(self) -> None:
        """Start PostgreSQL, S3 and Redis, then apply the migrations."""
        logs = self.root / "logs"
        for service in (
            EmbeddedPostgres(self.root / "postgres", logs, free_port_block()),
            EmbeddedS3(self.root / "s3", logs, free_port_block(8), BUCKET),
            EmbeddedRedis(self.root / "redis", logs, free_port_block()),
        ):
            service.start()
            self.services.append(service)
        if self.repo_root == REPO_ROOT:
            migrate.apply(self.postgres.url)
        else:  # the other build's own migrations, by its own code
            subprocess.run(
                [sys.executable, "-m", "infra.cli", "migrate"],
                env={**os.environ, "QUEUECORE_DATABASE_URL": self.postgres.url},
                cwd=self.repo_root,
                check=True,
                capture_output=True,
            )

    def env(self) -> dict[str, str]:
        """The ``QUEUECORE_*`` variables of the API process (the caller's own ones win)."""
        ours = {
            "QUEUECORE_DATABASE_URL": self.postgres.url,
            "QUEUECORE_OBJECT_STORE_URL": f"s3://{BUCKET}/",
            "QUEUECORE_S3_ENDPOINT_URL": self.s3.endpoint_url,
            "QUEUECORE_REDIS_URL": self.redis.url,
            "QUEUECORE_HTTP_HOST": HOST,
            "QUEUECORE_HTTP_PORT": str(self.http_port),
            "QUEUECORE_HTTP_WORKERS": str(self.workers),
        }
        # Tuning knobs (writer linger, pool sizes, log level) pass through; where to connect not.
        tuning = {k: v for k, v in os.environ.items() if k.startswith("QUEUECORE_")}
        # The writer logs its phase histograms for benchmarks/phases.py (a caller's value wins).
        timings = {"QUEUECORE_WRITER_TIMINGS_MS": str(phases.INTERVAL_MS)}
        return {**os.environ, **timings, **tuning, **ours, "PYTHONUNBUFFERED": "1"}

    def start_api(self, timeout_s: float = 60) -> None:
        """Start ``queuecore serve --workers N`` and wait until ``/healthz`` answers 200."""
        self.http_port = free_port_block()
        self.serve_log.parent.mkdir(parents=True, exist_ok=True)
        with self.serve_log.open("ab") as log:
            self.serve = subprocess.Popen(
                [sys.executable, "-m", "infra.cli", "serve", "--workers", str(self.workers)],
                env=self.env(),
                cwd=self.repo_root,  # ``-m`` puts the working directory first on sys.path
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=die_with_parent(signal.SIGTERM),
            )
        deadline = time.monotonic() + timeout_s
        while not self._healthy():
            if self.serve.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"queuecore serve did not start; see {self.serve_log}")
            time.sleep(0.2)

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"{self.base_url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def create_tenant(self) -> str:
        """An enterprise organisation without effective rate limits; returns a production key."""
        self.api_key = asyncio.run(_new_tenant(self.postgres.url))
        return self.api_key

    def developer_key(self) -> str:
        """A production key of a new Developer-tier organisation (100 publish, 50 consume a second)."""
        return asyncio.run(_new_tenant(self.postgres.url, tier="developer"))

    def tier_key(self, tier: str) -> str:
        """A production key of a new organisation of ``tier``, with that tier's own limits."""
        return asyncio.run(_new_tenant(self.postgres.url, tier=tier, custom=False))

    def create_topic(
        self, name: str, latency_class: str, partitions: int = 3, key: str | None = None
    ) -> None:
        """``POST /v1/topics``; anything but 201 stops the run with the server's answer."""
        body = {
            "name": name,
            "partitions": partitions,
            "retention": "1d",
            "delivery": "exactly-once",
            "latencyClass": latency_class,
        }
        response = httpx.post(
            f"{self.base_url}/v1/topics", json=body, headers=self.auth_headers(key), timeout=30
        )
        if response.status_code != 201:
            raise RuntimeError(f"creating topic {name}: {response.status_code} {response.text}")

    def auth_headers(self, key: str | None = None) -> dict[str, str]:
        """The bearer header of ``key``, by default the benchmark's own."""
        return {"Authorization": f"Bearer {key or self.api_key}"}

    def committed(self, topic: str) -> tuple[int, int]:
        """Committed segment objects (one per PUT whose flush committed); messages of ``topic``."""
        with psycopg.connect(self.postgres.url) as conn:
            objects = conn.execute("SELECT count(*) FROM segment_objects").fetchone()
            messages = conn.execute(STORED_MESSAGES, (topic,)).fetchone()
        return (int(objects[0]) if objects else 0, int(messages[0]) if messages else 0)

    def object_bytes(self) -> int:
        """Bytes of every committed segment object (what the object store was sent and kept)."""
        with psycopg.connect(self.postgres.url) as conn:
            row = conn.execute(
                "SELECT coalesce(sum(size_bytes), 0) FROM segment_objects"
            ).fetchone()
        return int(row[0]) if row else 0

    def database_now(self) -> datetime:
        """PostgreSQL's clock, which stamps committed segment objects."""
        with psycopg.connect(self.postgres.url) as conn:
            row = conn.execute("SELECT clock_timestamp()").fetchone()
        assert row is not None
        return cast(datetime, row[0])

    def commit_span_s(self, since: datetime) -> tuple[int, float]:
        """Segment objects committed since ``since``, and seconds from the first to the last."""
        with psycopg.connect(self.postgres.url) as conn:
            row = conn.execute(
                "SELECT count(*), extract(epoch FROM max(created_at) - min(created_at))"
                " FROM segment_objects WHERE created_at >= %s",
                (since,),
            ).fetchone()
        return (int(row[0]), float(row[1] or 0)) if row else (0, 0.0)

    def settled(self, topic: str, quiet_s: float = 0.5, timeout_s: float = 10) -> tuple[int, int]:
        """:meth:`committed` once it stops changing (cancelled publishes may still commit)."""
        last = self.committed(topic)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            time.sleep(quiet_s)
            now = self.committed(topic)
            if now == last:
                break
            last = now
        return last

    def bucket_objects(self) -> int:
        """Objects in the bucket, committed or not (a cross-check of the row count)."""
        client = s3_client(self.s3.endpoint_url, None, None, "us-east-1")
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
        return sum(page.get("KeyCount", 0) for page in pages)

    def api_memory(self) -> dict[str, Any]:
        """RSS (and PSS, which counts shared pages once) of the serve process tree."""
        assert self.serve is not None
        root = psutil.Process(self.serve.pid)
        procs = [root, *root.children(recursive=True)]
        rss = pss = 0
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                info = proc.memory_full_info()
                rss += info.rss
                pss += getattr(info, "pss", info.rss)
        return {"processes": len(procs), "rss_bytes": rss, "pss_bytes": pss}

    def process_groups(self) -> dict[str, int]:
        """Root pid of each process tree of the stack, by role, for CPU accounting."""
        groups = {s.name: s.process.pid for s in self.services if s.process is not None}
        if self.serve is not None:
            groups["api"] = self.serve.pid
        return groups

    def stop(self) -> None:
        """Stop the API, then the services, in reverse order of start."""
        if self.serve is not None and self.serve.poll() is None:
            self.serve.terminate()
            try:
                self.serve.wait(20)
            except subprocess.TimeoutExpired:
                _kill_tree(self.serve.pid)
                self.serve.wait(5)
        for service in reversed(self.services):
            with contextlib.suppress(Exception):
                service.stop()
        self.services.clear()


def _kill_tree(pid: int) -> None:
    with contextlib.suppress(psutil.NoSuchProcess):
        root = psutil.Process(pid)
        for proc in [*root.children(recursive=True), root]:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()


async def _new_tenant(database_url: str, tier: str = "enterprise", custom: bool = True) -> str:
    """Create the organisation with the tenancy service, exactly as sign-up does."""
    from tenants import service as tenants

    suffix = secrets.token_hex(4)
    async with await psycopg.AsyncConnection.connect(database_url, row_factory=dict_row) as conn:
        created = await tenants.create_organisation(
            conn,
            f"bench-{suffix}",
            f"bench-{suffix}@example.com",
            secrets.token_urlsafe(18),
            tier=tier,
        )
        if tier == "enterprise" and custom:
            await tenants.set_tier(conn, created.organisation.id, "enterprise", UNLIMITED)
        await conn.commit()
    return created.keys["production"].secret
