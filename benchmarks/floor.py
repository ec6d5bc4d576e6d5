"""The floor of end-to-end latency on this machine: the durable chain alone, with no API.

``python -m benchmarks.floor [--rate 1000] [--duration 15] [--json out]``

The target for publish → delivery is p99 ≤ 3x (one S3 PUT + one commit + linger), the reference
cost measured idle in the same run. This script measures how low any implementation could go on
the run's own SeaweedFS and PostgreSQL, by doing *only* what the durability contract requires of
every message and nothing else, in one uvloop process:

1. messages are scheduled on an open-loop timetable (as the consume benchmark's publisher does);
2. a group-committing flusher PUTs one object per flush through the segment writer's S3 client
   (the next PUT starts as soon as the previous one ends, or ``--overlap`` PUTs at once), then
   commits the flush in ONE autocommit statement that reserves offsets per partition, inserts
   one index row per partition and NOTIFYs;
3. one LISTEN connection receives the notification and hands each partition's range to its
   owner among ``--members`` consumers, which records a range lease in one statement (its
   commit waiting for the WAL flush, as a pull's does: docs/decisions.md §11) — or nothing with
   ``--no-lease`` — and stamps the delivery.

There is no HTTP, JSON, authentication, rate limiting, segment encoding, SSE or client at all, so
this is a lower bound: QueueCore does all of this and more. Latency is measured from each
message's scheduled time to its delivery stamp.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import msgspec
import psycopg

from benchmarks import rawhttp, reference
from benchmarks._stack import REPO_ROOT, Stack
from benchmarks.consumer_client import Stamp
from benchmarks.cpu import CpuWatch
from benchmarks.load import Latency, closed_loop, open_loop_stamped
from benchmarks.publish import _step, run
from core.object_store import ensure_bucket
from core.s3_http import Credentials, Endpoint, S3HttpClient, SigV4Signer
from infra.embedded import HOST, die_with_parent, free_port_block

BUCKET = "bench-floor"
MESSAGE_BYTES = 1024
SCHEMA = """
    DROP TABLE IF EXISTS floor_partitions, floor_blocks, floor_leases;
    CREATE TABLE floor_partitions (partition int PRIMARY KEY, next_offset bigint NOT NULL);
    CREATE TABLE floor_blocks (
        partition int, base_offset bigint, count int, object_key text,
        created_at timestamptz DEFAULT now());
    CREATE TABLE floor_leases (
        member int, partition int, first_offset bigint, last_offset bigint,
        expires_at timestamptz);
"""
# Offsets, index rows and the notification in one statement, partitions locked in order.
COMMIT = """
    WITH counts AS (
        SELECT unnest(%(partitions)s::int[]) AS partition, unnest(%(counts)s::int[]) AS n
    ), reserved AS (
        UPDATE floor_partitions p SET next_offset = p.next_offset + c.n FROM counts c
        WHERE p.partition = c.partition
        RETURNING p.partition, p.next_offset - c.n AS base_offset, c.n
    ), indexed AS (
        INSERT INTO floor_blocks (partition, base_offset, count, object_key)
        SELECT partition, base_offset, n, %(key)s FROM reserved
        RETURNING partition, base_offset, count
    )
    SELECT pg_notify('floor', json_build_object(
        'flush', %(flush)s::bigint,
        'blocks', (SELECT json_agg(json_build_array(partition, base_offset, count)) FROM indexed)
    )::text)
"""
LEASE = """
    INSERT INTO floor_leases (member, partition, first_offset, last_offset, expires_at)
    SELECT %(member)s, unnest(%(partitions)s::int[]), unnest(%(firsts)s::bigint[]),
           unnest(%(lasts)s::bigint[]), now() + interval '30 seconds'
"""


@dataclass(frozen=True)
class Config:
    """One floor run."""

    rate_per_s: int
    duration_s: float
    warmup_s: float
    partitions: int
    members: int
    overlap: int
    lease: bool
    linger_ms: float


# A message in the chain: index, scheduled time, body, and the publisher waiting for its commit.
Item = tuple[int, float, bytes, "asyncio.Future[None] | None"]
# What a member does with what it leased: (member index, the items, in partition order).
Deliver = Callable[[int, list[Item]], None]


@dataclass
class Floor:
    """The chain's state: what waits for a flush, and what each flush holds."""

    cfg: Config
    s3: S3HttpClient
    database_url: str
    deliver: Deliver
    pending: list[Item] = field(default_factory=list)
    flushes: dict[int, dict[int, list[Item]]] = field(default_factory=dict)
    puts: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    commits: asyncio.Queue[tuple[int, str, dict[int, list[Item]]]] = field(
        default_factory=asyncio.Queue
    )

    def add(self, item: Item) -> None:
        """A message to store and deliver."""
        self.pending.append(item)
        self.wake.set()

    async def flusher(self) -> None:
        """Group commit: take everything waiting, PUT it, queue its commit in PUT order."""
        slots = asyncio.Semaphore(self.cfg.overlap)
        flush_id = 0
        while True:
            await self.wake.wait()
            self.wake.clear()
            if not self.pending:
                continue
            if self.cfg.linger_ms:
                await asyncio.sleep(self.cfg.linger_ms / 1000)
            await slots.acquire()
            batch, self.pending = self.pending, []
            flush_id += 1
            by_partition: dict[int, list[Item]] = defaultdict(list)
            for item in batch:
                by_partition[item[0] % self.cfg.partitions].append(item)
            self.flushes[flush_id] = by_partition
            data = b"".join(item[2] for item in batch)
            task = asyncio.create_task(self._put(flush_id, data, by_partition))
            task.add_done_callback(lambda _: slots.release())
            if self.cfg.overlap == 1:
                await task  # the next flush takes what arrived during this PUT

    async def _put(self, flush_id: int, data: bytes, by_partition: dict[int, list[Item]]) -> None:
        key = f"floor/{flush_id:012d}"
        await self.s3.put_object(BUCKET, key, data)
        self.puts += 1
        await self.commits.put((flush_id, key, by_partition))

    async def committer(self) -> None:
        """Commits in PUT order on one connection, one statement each; then answers publishers."""
        async with await psycopg.AsyncConnection.connect(
            self.database_url, autocommit=True
        ) as conn:
            while True:
                flush_id, key, by_partition = await self.commits.get()
                partitions = sorted(by_partition)
                params = {
                    "flush": flush_id,
                    "key": key,
                    "partitions": partitions,
                    "counts": [len(by_partition[p]) for p in partitions],
                }
                await conn.execute(COMMIT, params)
                for items in by_partition.values():
                    for *_, answered in items:
                        if answered is not None and not answered.done():
                            answered.set_result(None)

    async def listener(self, members: list[Member]) -> None:
        """Hand each committed range to the member that owns its partition."""
        async with await psycopg.AsyncConnection.connect(
            self.database_url, autocommit=True
        ) as conn:
            await conn.execute("LISTEN floor")
            async for notice in conn.notifies():
                payload = json.loads(notice.payload)
                flushed = self.flushes.pop(payload["flush"])
                if not members:  # publishes only (``--single``): nobody consumes
                    continue
                for partition, base, count in payload["blocks"]:
                    member = members[partition % len(members)]
                    member.take(partition, base, count, flushed[partition])


@dataclass
class Member:
    """A consumer owning every ``members``-th partition: leases what it is handed, in one go."""

    index: int
    floor: Floor
    waiting: list[tuple[int, int, int, list[Item]]] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def take(self, partition: int, base: int, count: int, items: list[Item]) -> None:
        """A committed range of one of this member's partitions."""
        self.waiting.append((partition, base, count, items))
        self.wake.set()

    async def run(self) -> None:
        """Lease what arrived (one statement), then deliver it."""
        async with await psycopg.AsyncConnection.connect(
            self.floor.database_url, autocommit=True
        ) as conn:
            while True:
                await self.wake.wait()
                self.wake.clear()
                ranges, self.waiting = self.waiting, []
                if self.floor.cfg.lease:
                    params = {
                        "member": self.index,
                        "partitions": [r[0] for r in ranges],
                        "firsts": [r[1] for r in ranges],
                        "lasts": [r[1] + r[2] - 1 for r in ranges],
                    }
                    await conn.execute(LEASE, params)
                self.floor.deliver(self.index, [item for r in ranges for item in r[3]])


def prepare(cfg: Config, s3_endpoint: str, database_url: str) -> None:
    """Fresh tables and the bucket."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute(
            "INSERT INTO floor_partitions SELECT generate_series(0, %s - 1), 0", (cfg.partitions,)
        )
    ensure_bucket(s3_endpoint, BUCKET, None, None, "us-east-1")


@contextlib.asynccontextmanager
async def chain(
    cfg: Config, s3_endpoint: str, database_url: str, deliver: Deliver
) -> AsyncIterator[Floor]:
    """The running chain: members, listener, committer and flusher, stopped on exit."""
    s3 = S3HttpClient(
        Endpoint.parse(s3_endpoint, "us-east-1"),
        SigV4Signer("us-east-1", lambda: Credentials("queuecore", "queuecore")),
    )
    floor = Floor(cfg, s3, database_url, deliver)
    members = [Member(i, floor) for i in range(cfg.members)]
    background = [asyncio.create_task(m.run()) for m in members]
    background += [
        asyncio.create_task(floor.listener(members)),
        asyncio.create_task(floor.committer()),
        asyncio.create_task(floor.flusher()),
    ]
    await asyncio.sleep(0.5)  # connections up, LISTEN registered
    try:
        yield floor
    finally:
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        s3.close()


async def measure(cfg: Config, s3_endpoint: str, database_url: str) -> dict[str, Any]:
    """Run the chain on the timetable; latencies of the messages after the warm-up."""
    prepare(cfg, s3_endpoint, database_url)
    delivered: dict[int, float] = {}  # index → latency ms

    def stamp(_member: int, items: list[Item]) -> None:
        now = time.monotonic()
        for index, scheduled, *_ in items:
            delivered[index] = (now - scheduled) * 1000

    body = secrets.token_bytes(MESSAGE_BYTES)
    total = int((cfg.warmup_s + cfg.duration_s) * cfg.rate_per_s)
    async with chain(cfg, s3_endpoint, database_url, stamp) as floor:
        # time.monotonic(), not loop.time(): uvloop's clock ticks in whole milliseconds.
        start = time.monotonic()
        for index in range(total):
            due = start + index / cfg.rate_per_s
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            floor.add((index, due, body, None))
        deadline = time.monotonic() + 10
        while len(delivered) < total and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        puts = floor.puts
    warm = int(cfg.warmup_s * cfg.rate_per_s)
    latency = Latency(cfg.rate_per_s, sent=total - warm)
    latency.latencies_ms = [ms for index, ms in delivered.items() if index >= warm]
    result = latency.as_dict()
    result.update(delivered=len(delivered), scheduled=total, puts=puts)
    return result


STAMP = msgspec.json.Decoder(Stamp)
HTTP_CONNECTIONS = 256


def serve_http(cfg: Config, stack: Stack, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    """``benchmarks.floor_http`` under uvicorn (uvloop, httptools, one worker), once healthy."""
    port = free_port_block()
    env = {
        **os.environ,
        "QUEUECORE_FLOOR_PARTITIONS": str(cfg.partitions),
        "QUEUECORE_FLOOR_MEMBERS": str(cfg.members),
        "QUEUECORE_FLOOR_OVERLAP": str(cfg.overlap),
        "QUEUECORE_FLOOR_LEASE": "1" if cfg.lease else "0",
        "QUEUECORE_FLOOR_LINGER_MS": str(cfg.linger_ms),
        "QUEUECORE_FLOOR_S3": stack.s3.endpoint_url,
        "QUEUECORE_FLOOR_DATABASE": stack.postgres.url,
    }
    command = [sys.executable, "-m", "uvicorn", "benchmarks.floor_http:create_app", "--factory"]
    command += ["--host", HOST, "--port", str(port), "--no-access-log", "--log-level", "warning"]
    with log.open("ab") as out:
        server = subprocess.Popen(
            command,
            env=env,
            cwd=REPO_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent(signal.SIGTERM),
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and server.poll() is None:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://{HOST}:{port}/healthz", timeout=2).status_code == 200:
                return server, port
        time.sleep(0.2)
    server.kill()
    raise RuntimeError(f"the floor's HTTP server did not start; see {log}")


async def measure_http(cfg: Config, port: int) -> dict[str, Any]:
    """Open-loop publishes over HTTP, deliveries on SSE streams: as the consumer benchmark."""
    received: dict[int, float] = {}  # index → latency ms
    streams = [
        rawhttp.EventStream(
            HOST,
            port,
            rawhttp.build_get(HOST, port, f"/stream/{m}", {"Accept": "text/event-stream"}),
        )
        for m in range(cfg.members)
    ]
    for stream in streams:
        await stream.open()

    async def read(stream: rawhttp.EventStream) -> None:
        async for event, data in stream.events():
            if event == "message":
                stamp = STAMP.decode(data)
                received.setdefault(stamp.i, (time.monotonic() - stamp.t) * 1000)

    readers = [asyncio.create_task(read(s)) for s in streams]
    pool = rawhttp.Pool(HOST, port, HTTP_CONNECTIONS)
    text = secrets.token_hex(MESSAGE_BYTES // 2)
    headers = {"Content-Type": "application/json"}

    async def probe(index: int, scheduled: float) -> float | None:
        body = b'{"i":%d,"t":%r,"p":"%s"}' % (index, scheduled, text.encode())
        status, answer = await pool.send(
            rawhttp.build_request(HOST, port, "/publish", headers, body)
        )
        if status != 201:
            raise RuntimeError(f"publish answered {status} {answer[:200]!r}")
        return None

    publishing = await open_loop_stamped(
        probe, cfg.rate_per_s, cfg.duration_s, cfg.warmup_s, HTTP_CONNECTIONS, 10
    )
    total = int((cfg.warmup_s + cfg.duration_s) * cfg.rate_per_s)
    deadline = time.monotonic() + 10
    while len(received) < total and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    for task in readers:
        task.cancel()
    for stream in streams:
        stream.close()
    pool.close()
    warm = int(cfg.warmup_s * cfg.rate_per_s)
    latency = Latency(cfg.rate_per_s, sent=total - warm)
    latency.latencies_ms = [ms for index, ms in received.items() if index >= warm]
    result = latency.as_dict()
    result.update(delivered=len(received), scheduled=total, publish=publishing.as_dict())
    return result


async def measure_single(port: int, clients: int, duration_s: float) -> dict[str, Any]:
    """Closed-loop single-message publishes from ``clients`` keep-alive connections, as the
    publish benchmark's single-message phase sends them: its floor of API CPU per publish."""
    text = secrets.token_hex(MESSAGE_BYTES // 2)
    headers = {"Content-Type": "application/json"}
    request = rawhttp.build_request(
        HOST, port, "/publish", headers, b'{"data":"%s"}' % text.encode()
    )
    connections = [rawhttp.Connection(HOST, port) for _ in range(clients)]

    async def send(index: int) -> int:
        status, answer = await connections[index].send(request)
        if status != 201:
            raise RuntimeError(f"publish answered {status} {answer[:200]!r}")
        return 1

    try:
        return (await closed_loop(send, clients, duration_s, 2.0)).as_dict()
    finally:
        for connection in connections:
            connection.close()


def _single(args: argparse.Namespace, cfg: Config, stack: Stack) -> int:
    """``--single N``: the API's CPU per single-message publish behind the thinnest app."""
    cfg = dataclasses.replace(cfg, members=0)
    server, port = serve_http(cfg, stack, stack.root / "floor_http.log")
    stack.serve = server
    with CpuWatch(stack.process_groups()) as watch:
        result = run(measure_single(port, args.single, cfg.duration_s))
    api_cpu_s = watch.groups_cpu_s.get("api") or 0.0
    result["api_cpu_us_per_msg"] = round(api_cpu_s * 1e6 / max(1, result["messages"]), 1)
    result["cpu_pct_by_process"] = watch.groups_pct
    print(
        f"floor single-message publish, {args.single} clients: {result['msgs_per_s']:,.0f} msg/s, "
        f"API CPU {result['api_cpu_us_per_msg']:,.1f} µs per message; CPU {watch.groups_pct}"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {"config": vars(args) | {"json": str(args.json)}, "single": result}, indent=2
            )
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    """Start PostgreSQL and SeaweedFS, measure the reference cost, then the floor."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.floor", description=__doc__)
    parser.add_argument("--rate", type=int, default=1000, help="messages per second (1000)")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds measured (15)")
    parser.add_argument("--partitions", type=int, default=8, help="partitions (8)")
    parser.add_argument("--members", type=int, default=4, help="consumers (4)")
    parser.add_argument("--overlap", type=int, default=1, help="PUTs in flight at once (1)")
    parser.add_argument("--linger-ms", type=float, default=0.0, help="wait before a flush (0)")
    parser.add_argument("--no-lease", action="store_true", help="deliver without a lease row")
    parser.add_argument("--http", action="store_true", help="behind the thinnest Litestar app")
    parser.add_argument(
        "--single",
        type=int,
        default=0,
        metavar="N",
        help="instead: closed-loop single-message publishes from N clients (HTTP, no consumers)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    args = parser.parse_args(argv)
    cfg = Config(
        args.rate,
        args.duration,
        2.0,
        args.partitions,
        args.members,
        args.overlap,
        not args.no_lease,
        args.linger_ms,
    )
    stack = Stack(Path(tempfile.mkdtemp(prefix="queuecore-floor-")), 1)
    try:
        _step("starting PostgreSQL and SeaweedFS S3")
        stack.start_services()
        if args.single:
            return _single(args, cfg, stack)
        ref = reference.measure(stack.s3.endpoint_url, stack.postgres.url, 200)
        _step(f"floor{' over HTTP' if args.http else ''} at {cfg.rate_per_s} msg/s")
        server = None
        if args.http:
            server, port = serve_http(cfg, stack, stack.root / "floor_http.log")
            stack.serve = server  # counted as "api" by the CPU watch, stopped with the stack
        with CpuWatch(stack.process_groups()) as watch:
            if args.http:
                result = run(measure_http(cfg, port))
            else:
                result = run(measure(cfg, stack.s3.endpoint_url, stack.postgres.url))
        result["cpu_pct_by_process"] = watch.groups_pct
    finally:
        stack.stop()
    target = 3 * (ref.put_p50_ms + ref.commit_p50_ms + cfg.linger_ms)
    print(
        f"floor p50 {result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms, "
        f"p99.9 {result['p999_ms']:.1f} ms; {result.get('puts', '?')} PUTs for "
        f"{result['scheduled']} messages; CPU {result['cpu_pct_by_process']}; 3x (PUT {ref.put_p50_ms:.2f} + commit "
        f"{ref.commit_p50_ms:.2f} + linger {cfg.linger_ms:g} ms) → target p99 ≤ {target:.1f} ms"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "config": vars(args) | {"json": str(args.json)},
                    "reference": ref.as_dict(),
                    "floor": result,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
