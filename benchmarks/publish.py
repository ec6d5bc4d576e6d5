"""The publish benchmark: ``python -m benchmarks.publish [--duration S] [--quick] [--peers …]``.

Starts a private QueueCore stack (embedded PostgreSQL, SeaweedFS S3, Redis, ``queuecore serve``),
measures durable publish throughput, single-message rate, open-loop latency per latency class,
S3 PUTs per 1,000 messages and API memory, measures the reference cost of one flush on the same
services, then runs the peers (Redis Streams, RabbitMQ) one after the other, and prints a
markdown table of ratios against the targets in ``benchmarks/README.md``. See ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import psycopg

from benchmarks import peers, phases, rawhttp, reference, tenants
from benchmarks._stack import Stack
from benchmarks.cpu import CpuWatch, shares
from benchmarks.load import closed_loop, open_loop, payloads
from benchmarks.report import machine, render
from core.gc_tuning import freeze_startup_heap
from infra.embedded import HOST, binary, free_port_block

T = TypeVar("T")
BATCH = 100
PEERS = ("redis", "rabbitmq")
MAX_IN_FLIGHT = 512  # open loop: standard alone needs rate x linger = 1,000 x 0.15 s
JSON_HEADERS = {"Content-Type": "application/json"}
TOPICS = (
    ("bench.batched", "express"),
    ("bench.single", "express"),
    ("bench.express", "express"),
    ("bench.standard", "standard"),
)


@dataclass(frozen=True)
class Config:
    """What one run measures, and for how long."""

    duration_s: float
    warmup_s: float
    clients: int
    rate_per_s: int
    workers: int
    reference_samples: int
    drain_s: float
    peers: tuple[str, ...]
    noisy: bool = True  # the noisy-neighbour phase (benchmarks.tenants)


class PublishFailed(Exception):
    """A publish was not answered 201."""


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on uvloop when it is installed (as uvicorn does), else on asyncio's loop.

    The load generator's garbage collector is tuned like the API's (``core.gc_tuning``): its
    full collections paused the client for 60 ms, which counted as latency of every system.
    """
    freeze_startup_heap()
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def start_measured_stack(stack: Stack, reference_samples: int, results: dict[str, Any]) -> None:
    """Start the services, measure the reference cost on them, then the API and a tenant."""
    _step("starting PostgreSQL, SeaweedFS S3 and Redis")
    stack.start_services()
    results["postgres_version"] = _postgres_version(stack.postgres.url)
    _step(f"reference cost: {reference_samples} S3 PUTs and commits")
    results["reference"] = reference.measure(
        stack.s3.endpoint_url, stack.postgres.url, reference_samples
    ).as_dict()
    _step("object store ingest: 4 PUTs of 256 KiB in flight, nothing else running")
    assert stack.s3.process is not None
    results["object_store_ingest"] = reference.object_store_ingest(
        stack.s3.endpoint_url, stack.s3.process.pid
    )
    write_back()  # the ingest wrote ~350 MB: not to be written back during a phase
    _step(f"starting queuecore serve --workers {stack.workers}")
    stack.start_api()
    stack.create_tenant()


def run_queuecore(cfg: Config, root: Path, results: dict[str, Any]) -> None:
    """Start the stack, measure every QueueCore phase and the reference cost, stop the stack."""
    stack = Stack(root / "queuecore", cfg.workers)
    try:
        start_measured_stack(stack, cfg.reference_samples, results)
        results["standard_linger_ms"] = reference.standard_linger()
        for name, latency_class in TOPICS:
            stack.create_topic(name, latency_class)
        results["queuecore"] = run(_http_phases(stack, cfg))
        results["queuecore"]["memory"] = stack.api_memory()
    except Exception as exc:
        results["queuecore_error"] = f"{type(exc).__name__}: {exc}"[:500]
        _step(f"QueueCore phases failed: {results['queuecore_error']} (log: {stack.serve_log})")
    finally:
        stack.stop()


async def _http_phases(stack: Stack, cfg: Config) -> dict[str, Any]:
    texts = payloads()
    batches = [
        _encode({"messages": [{"data": p} for p in texts[i : i + BATCH]]})
        for i in range(0, len(texts), BATCH)
    ]
    singles = [_encode({"data": p}) for p in texts]
    out: dict[str, Any] = {}
    clients = _connections(stack, cfg.clients)
    _step(f"QueueCore batched publish: {cfg.clients} clients x {BATCH} messages per request")
    batched = _sender(clients, _requests(stack, "bench.batched", batches, batch=True))
    out["batched"] = await _throughput_phase(stack, "bench.batched", batched, cfg)
    _step(f"QueueCore single-message publish: {cfg.clients} clients")
    single = _sender(clients, _requests(stack, "bench.single", singles, batch=False))
    out["single"] = await _throughput_phase(stack, "bench.single", single, cfg)
    _close(clients)
    for latency_class in ("express", "standard"):
        _step(f"QueueCore {latency_class} latency at {cfg.rate_per_s} msg/s (open loop)")
        requests = _requests(stack, f"bench.{latency_class}", singles, batch=False)
        write_back()
        before = phases.settled(stack.serve_log)
        with CpuWatch(stack.process_groups()) as watch:
            out[latency_class] = await _latency_phase(
                stack, f"bench.{latency_class}", requests, cfg
            )
        out[latency_class]["phases"] = phases.window(before, phases.settled(stack.serve_log))
        _result(out[latency_class], watch, out[latency_class]["messages_stored"])
    if cfg.noisy:
        _step(f"noisy neighbour: a quiet Pro tenant at {tenants.QUIET_RATE}/s, alone then beside")
        write_back()
        out["noisy"] = await tenants.noisy_neighbour(stack, cfg.duration_s, cfg.warmup_s)
        _step(tenants.summary(out["noisy"]))
    return out


def write_back() -> float:
    """Write every dirty page to disk now; seconds it took.

    The batched phase leaves about half a gigabyte of SeaweedFS data in the page cache, and the
    kernel writes pages back 30 s after they were dirtied (``vm.dirty_expire_centisecs``): in the
    middle of a later phase, where that writeback held PostgreSQL's WAL flushes for up to 100 ms
    (an fsync probe beside a run saw 96 ms). Each phase starts with the disk clean, so it pays
    for its own writes and not for an earlier phase's.
    """
    began = time.monotonic()
    os.sync()
    return time.monotonic() - began


async def _throughput_phase(stack: Stack, topic: str, send: Any, cfg: Config) -> dict[str, Any]:
    write_back()
    before = phases.settled(stack.serve_log)
    _, stored_before = stack.committed(topic)
    bytes_before = stack.object_bytes()
    with CpuWatch(stack.process_groups()) as watch:
        result = (await closed_loop(send, cfg.clients, cfg.duration_s, cfg.warmup_s)).as_dict()
    _, stored_after = stack.settled(topic)
    if stored_after > stored_before:  # segment bytes per message: after zstd, with block headers
        result["object_bytes_per_msg"] = round(
            (stack.object_bytes() - bytes_before) / (stored_after - stored_before), 1
        )
    result["phases"] = phases.window(before, phases.settled(stack.serve_log))
    _result(result, watch, stored_after - stored_before)
    return result


def _result(result: dict[str, Any], watch: CpuWatch, stored: int | None = None) -> None:
    """Attach the phase's CPU shares (and the API's CPU per message stored) to its result,
    and print the headline numbers."""
    result.update(shares(watch))
    api_cpu_s = watch.groups_cpu_s.get("api")
    if stored and api_cpu_s is not None:
        result["api_cpu_us_per_msg"] = round(api_cpu_s * 1e6 / stored, 1)
    keys = (
        "msgs_per_s",
        "p50_ms",
        "p99_ms",
        "puts_per_1000",
        "errors",
        "api_cpu_us_per_msg",
        "others_cpu_pct",
    )
    _step("  " + ", ".join(f"{k}={result[k]:.6g}" for k in keys if result.get(k) is not None))
    timing = result.get("phases")
    if timing:
        _step("  phases: " + phases.summary(timing))


async def _latency_phase(
    stack: Stack, topic: str, requests: list[bytes], cfg: Config
) -> dict[str, Any]:
    """Open-loop publishes; PUTs = committed segment objects added, per message stored."""
    objects_before, messages_before = stack.settled(topic)
    bucket_before = stack.bucket_objects()
    cursor = iter(range(sys.maxsize))
    # One connection per request in flight, as many independent producers would have.
    idle: asyncio.Queue[rawhttp.Connection] = asyncio.Queue()
    for connection in _connections(stack, MAX_IN_FLIGHT):
        idle.put_nowait(connection)

    async def probe() -> float | None:
        connection = await idle.get()
        try:
            answer = _answer(await connection.send(requests[next(cursor) % len(requests)]))
        finally:
            idle.put_nowait(connection)
        latency = answer.get("latency")
        return float(latency) if isinstance(latency, int | float) else None

    began, began_at = time.monotonic(), stack.database_now()
    measured = await open_loop(
        probe, cfg.rate_per_s, cfg.duration_s, cfg.warmup_s, MAX_IN_FLIGHT, cfg.drain_s
    )
    wall_s = time.monotonic() - began
    _close([idle.get_nowait() for _ in range(idle.qsize())])
    result = measured.as_dict()
    objects, messages = stack.settled(topic)
    puts, stored = objects - objects_before, messages - messages_before
    result.update(segment_puts=puts, messages_stored=stored, phase_wall_s=round(wall_s, 2))
    # Each API process has its own writer: its mean time between two flushes, from the commit
    # times of the first and last objects (the phase's lead-in and tail are no flush interval).
    flushes, span_s = stack.commit_span_s(began_at)
    gaps = flushes - cfg.workers
    result["flush_interval_ms"] = cfg.workers * span_s * 1000 / gaps if gaps > 0 else None
    result["bucket_objects_added"] = stack.bucket_objects() - bucket_before
    result["puts_per_1000"] = puts * 1000 / stored if stored else None
    return result


def _requests(stack: Stack, topic: str, bodies: list[bytes], batch: bool) -> list[bytes]:
    """Every request of a phase, built before the clock starts."""
    path = f"/v1/topics/{topic}/messages" + ("/batch" if batch else "")
    headers = {**stack.auth_headers(), **JSON_HEADERS}
    return [rawhttp.build_request(HOST, stack.http_port, path, headers, b) for b in bodies]


def _sender(clients: list[rawhttp.Connection], requests: list[bytes]) -> Any:
    """A closed-loop send: client ``index`` posts its next request; messages acknowledged."""
    turns = [0] * len(clients)

    async def send(index: int) -> int:
        turns[index] += 1
        request = requests[(turns[index] * len(clients) + index) % len(requests)]
        answer = _answer(await clients[index].send(request))
        return int(answer.get("count", 1))

    return send


def _answer(response: tuple[int, bytes]) -> dict[str, Any]:
    status, body = response
    if status != 201:
        raise PublishFailed(f"{status} {body[:200].decode(errors='replace')}")
    decoded: dict[str, Any] = msgspec.json.decode(body)
    return decoded


def _connections(stack: Stack, count: int) -> list[rawhttp.Connection]:
    """``count`` keep-alive connections to the API, opened on first use."""
    return [rawhttp.Connection(HOST, stack.http_port) for _ in range(count)]


def _close(connections: list[rawhttp.Connection]) -> None:
    for connection in connections:
        connection.close()


def _encode(value: Any) -> bytes:
    return msgspec.json.encode(value)


def run_peers(cfg: Config, root: Path, results: dict[str, Any]) -> None:
    """Measure each selected peer that is installed; say why for the others."""
    texts = payloads()
    results["peers"] = peers.run_selected(
        PEERS, cfg.peers, lambda name: _run_peer(name, cfg, root / name, texts), _step
    )


def _run_peer(name: str, cfg: Config, root: Path, texts: list[str]) -> dict[str, Any]:
    server: peers.FsyncRedis | peers.RabbitNode
    if name == "redis":
        server = peers.FsyncRedis(root, root / "logs", free_port_block())
        measure = peers.redis_streams
    else:
        server = peers.RabbitNode(root)
        measure = peers.rabbitmq_quorum
    try:
        _step(f"peer {name}: starting a private server")
        server.start()
        _step(f"peer {name}: batched then single-message publish, {cfg.clients} clients")
        with CpuWatch({name: _server_pid(server)}) as watch:
            measured = run(measure(server.port, texts, cfg.clients, cfg.duration_s, cfg.warmup_s))
        phases = {phase: t.as_dict() for phase, t in measured.items()}
        for result in phases.values():
            _result(result, watch)
        return {"status": "ok", "version": server.version(), **phases}
    except Exception as exc:
        _step(f"peer {name} failed: {exc}")
        return {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"[:300]}
    finally:
        server.stop()


def _server_pid(server: peers.FsyncRedis | peers.RabbitNode) -> int:
    if isinstance(server, peers.RabbitNode):
        return server.processes[-1].pid  # the node; its epmd idles
    assert server.process is not None
    return server.process.pid


def _postgres_version(url: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "?"


def _seaweedfs_version() -> str:
    with contextlib.suppress(Exception):
        words = subprocess.run(
            [binary("weed"), "version"], capture_output=True, text=True, check=False
        ).stdout.split()
        return words[2] if len(words) > 2 else "?"
    return "?"


def _step(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> tuple[Config, argparse.Namespace]:
    """The command line; ``--quick`` is a ~1-minute smoke run."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.publish", description=__doc__)
    parser.add_argument(
        "--duration", type=float, default=None, help="seconds per phase (15; 3 with --quick)"
    )
    parser.add_argument("--quick", action="store_true", help="short phases: a ~1-minute smoke run")
    parser.add_argument("--peers", default="redis,rabbitmq", help="comma list, or 'none'")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    parser.add_argument("--workers", type=int, default=1, help="queuecore serve processes (1)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients (8)")
    parser.add_argument("--rate", type=int, default=1000, help="open-loop msg/s (1000)")
    parser.add_argument("--keep", action="store_true", help="keep data and logs of the run")
    parser.add_argument("--no-noisy", action="store_true", help="skip the noisy-neighbour phase")
    parser.add_argument(
        "--ab", type=Path, default=None, help="compare with the build in this worktree (A/B)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="A/B rounds of each phase (3)")
    args = parser.parse_args(argv)
    selected = tuple(p.strip() for p in args.peers.split(",") if p.strip() not in {"", "none"})
    unknown = set(selected) - set(PEERS)
    if unknown:
        parser.error(f"unknown peer(s) {', '.join(sorted(unknown))}; known: {', '.join(PEERS)}")
    duration = args.duration or (3.0 if args.quick else 15.0)
    cfg = Config(
        duration_s=duration,
        warmup_s=1.0 if args.quick else 2.0,
        clients=args.clients,
        rate_per_s=args.rate,
        workers=args.workers,
        reference_samples=100 if args.quick else 200,
        drain_s=3.0 if args.quick else 10.0,
        peers=selected,
        noisy=not args.no_noisy,
    )
    return cfg, args


def run_benchmark(
    prefix: str,
    cfg: Any,
    args: argparse.Namespace,
    queuecore: Callable[[Any, Path, dict[str, Any]], None],
    peers_phase: Callable[[Any, Path, dict[str, Any]], None],
    render_table: Callable[[dict[str, Any]], str],
) -> int:
    """Run QueueCore's phases then the peers' in a temp dir, print the table, write the JSON."""
    # A SIGTERM (timeout, CI) unwinds like Ctrl-C, so every server started is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    root = Path(tempfile.mkdtemp(prefix=prefix))
    results: dict[str, Any] = {"config": asdict(cfg), "machine": machine()}
    results["seaweedfs_version"] = _seaweedfs_version()
    began = time.monotonic()
    try:
        with CpuWatch() as watch:
            queuecore(cfg, root, results)
            peers_phase(cfg, root, results)
        results["others_cpu_pct"] = round(watch.others_pct, 1)
        results["steal_cpu_pct"] = watch.steal_pct
    finally:
        results["wall_clock_s"] = round(time.monotonic() - began, 1)
        if args.keep or results.get("queuecore_error"):
            _step(f"data and logs kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(render_table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 1 if results.get("queuecore_error") else 0


def main(argv: list[str] | None = None) -> int:
    """Run every phase, print the table, optionally write the JSON results."""
    cfg, args = parse_args(argv)
    if args.ab is not None:
        from benchmarks import ab  # it uses this module's phases

        return ab.main(cfg, args)
    return run_benchmark("queuecore-bench-", cfg, args, run_queuecore, run_peers, render)


if __name__ == "__main__":
    sys.exit(main())
