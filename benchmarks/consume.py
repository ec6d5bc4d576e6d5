"""The consumer benchmark: ``python -m benchmarks.consume [--quick] [--peers …] [--json out]``.

Starts a private QueueCore stack, measures the reference cost of one flush, then (1) end-to-end
latency publish → delivery on SSE streams at a fixed open-loop publish rate, and (2) consume+ack
throughput of one group over a pre-published backlog, from the first pull until the group's lag
is 0; then the same backlog drained from Redis Streams and a RabbitMQ quorum queue. Prints a
markdown table against its targets. See ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgspec

from benchmarks import consume_peers, peers, rawhttp
from benchmarks._stack import Stack
from benchmarks.consume_report import render
from benchmarks.consumer_client import PULLED, STREAMED, Acker
from benchmarks.cpu import CpuWatch, shares
from benchmarks.load import Latency, open_loop_stamped, payloads
from benchmarks.publish import (
    JSON_HEADERS,
    _step,
    run,
    run_benchmark,
    start_measured_stack,
    write_back,
)
from infra.embedded import HOST, free_port_block

PEERS = ("redis", "rabbitmq")
E2E_TOPIC, E2E_GROUP = "bench.e2e", "e2e"
DRAIN_TOPIC, DRAIN_GROUP = "bench.drain", "drain"
PUBLISH_BATCH = 1000
PUBLISHERS = 4
PUBLISH_CONNECTIONS = 256


@dataclass(frozen=True)
class Config:
    """What one run measures, and how much of it."""

    messages: int
    members: int
    partitions: int
    pull_max: int
    max_in_flight: int
    rate_per_s: int
    duration_s: float
    warmup_s: float
    drain_s: float
    workers: int
    reference_samples: int
    rabbit_prefetch: int
    rabbit_ack_every: int
    peers: tuple[str, ...]


async def _configure_group(
    client: httpx.AsyncClient, topic: str, group: str, start_from: str, cfg: Config
) -> list[str]:
    """``PUT`` the group (no redelivery or eviction within a run), then join ``members``."""
    body = {
        "startFrom": start_from,
        "ackTimeout": "300s",
        "sessionTimeout": "300s",
        "maxInFlight": cfg.max_in_flight,
    }
    response = await client.put(f"/v1/topics/{topic}/groups/{group}", json=body)
    if response.status_code != 200:
        raise RuntimeError(f"configuring group {group}: {response.status_code} {response.text}")
    members = []
    for index in range(cfg.members):
        joined = await client.post(
            f"/v1/topics/{topic}/groups/{group}/members", json={"clientId": f"bench-{index}"}
        )
        if joined.status_code not in (200, 201):
            raise RuntimeError(f"joining {group}: {joined.status_code} {joined.text}")
        members.append(joined.json()["memberId"])
    return members


async def _lag(client: httpx.AsyncClient, topic: str, group: str) -> int:
    response = await client.get(f"/v1/topics/{topic}/groups/{group}/offsets")
    response.raise_for_status()
    return sum(int(p["lag"]) for p in response.json()["partitions"])


# --- end-to-end latency ---------------------------------------------------------------------


async def e2e_phase(stack: Stack, client: httpx.AsyncClient, cfg: Config) -> dict[str, Any]:
    """Open-loop publishes stamped with their scheduled time; latency measured on SSE receipt."""
    members = await _configure_group(client, E2E_TOPIC, E2E_GROUP, "latest", cfg)
    loop = asyncio.get_running_loop()
    warm = int(cfg.warmup_s * cfg.rate_per_s)
    delivered: dict[int, float] = {}
    received: dict[int, float] = {}  # time.monotonic() each message first arrived on a stream
    published: dict[int, float] = {}
    answered: dict[int, float] = {}  # time.monotonic() each publish's 201 was read
    counters = {"duplicates": 0, "redelivered": 0}
    ackers = [Acker(stack, E2E_TOPIC, E2E_GROUP) for _ in members]
    streams = [_event_stream(stack, member) for member in members]
    for stream in streams:
        await stream.open()

    async def read(stream: rawhttp.EventStream, acker: Acker) -> None:
        async for event, data in stream.events():
            if event == "error":
                raise RuntimeError(f"stream ended: {data[:300]!r}")
            if event != "message":
                continue
            message = STREAMED.decode(data)
            now = time.monotonic()
            counters["redelivered"] += message.attempt > 1
            if message.data.i in delivered:
                counters["duplicates"] += 1
            else:
                delivered[message.data.i] = (now - message.data.t) * 1000
                received[message.data.i] = now
            acker.add(message.partition, [message.ack_id])

    readers = [loop.create_task(read(s, a)) for s, a in zip(streams, ackers, strict=True)]
    publishing = await _publish_open_loop(stack, cfg, published, answered)
    await _await_deliveries(published, delivered, readers, cfg.drain_s)
    for acker in ackers:
        await asyncio.wait_for(acker.flush(), 30)
    now = time.monotonic()
    missing = [i for i in published if i not in delivered and i >= warm]
    latency = Latency(cfg.rate_per_s, sent=publishing.sent, unanswered=len(missing))
    latency.latencies_ms = [ms for i, ms in delivered.items() if i >= warm]
    latency.latencies_ms += [(now - published[i]) * 1000 for i in missing]
    for task in readers:
        task.cancel()
    await asyncio.gather(*readers, return_exceptions=True)
    for stream in streams:
        stream.close()
    result = latency.as_dict()
    after = Latency(cfg.rate_per_s, sent=publishing.sent)
    after.latencies_ms = [
        (received[i] - answered[i]) * 1000 for i in received if i >= warm and i in answered
    ]
    result.update(
        # Delivery seen from the publisher: stream receipt - the publish's 201 (negative when
        # the stream was faster than the response), i.e. the consume side's share of e2e.
        after_answer=after.as_dict(),
        delivered=len(delivered),
        published_ok=publishing.acknowledged_total,
        publish_errors=publishing.errors,
        publish=publishing.as_dict(),
        acked=sum(a.acked for a in ackers),
        ack_requests=sum(a.requests for a in ackers),
        ack_rejections=[r for a in ackers for r in a.rejected][:5],
        members=len(members),
        **counters,
    )
    for acker in ackers:
        acker.close()
    return result


def _event_stream(stack: Stack, member: str) -> rawhttp.EventStream:
    path = f"/v1/topics/{E2E_TOPIC}/groups/{E2E_GROUP}/members/{member}/stream"
    headers = {**stack.auth_headers(), "Accept": "text/event-stream"}
    return rawhttp.EventStream(
        HOST, stack.http_port, rawhttp.build_get(HOST, stack.http_port, path, headers)
    )


async def _publish_open_loop(
    stack: Stack, cfg: Config, published: dict[int, float], answered: dict[int, float]
) -> Latency:
    """Publish on the timetable; each body carries its index and scheduled send time."""
    texts = [t.encode() for t in payloads()]
    path = f"/v1/topics/{E2E_TOPIC}/messages"
    headers = {**stack.auth_headers(), **JSON_HEADERS}
    pool = rawhttp.Pool(HOST, stack.http_port, PUBLISH_CONNECTIONS)

    async def probe(index: int, scheduled: float) -> float | None:
        body = b'{"data":{"i":%d,"t":%r,"p":"%s"}}' % (index, scheduled, texts[index % len(texts)])
        status, answer = await pool.send(
            rawhttp.build_request(HOST, stack.http_port, path, headers, body)
        )
        if status != 201:
            raise RuntimeError(f"publish answered {status} {answer[:200]!r}")
        published[index] = scheduled
        answered[index] = time.monotonic()
        return None

    try:
        return await open_loop_stamped(
            probe, cfg.rate_per_s, cfg.duration_s, cfg.warmup_s, PUBLISH_CONNECTIONS, cfg.drain_s
        )
    finally:
        pool.close()


async def _await_deliveries(
    published: dict[int, float],
    delivered: dict[int, float],
    readers: list[asyncio.Task[None]],
    drain_s: float,
) -> None:
    """Until every published message arrived, a stream failed, or ``drain_s`` passed."""
    deadline = time.monotonic() + drain_s
    while time.monotonic() < deadline and any(i not in delivered for i in published):
        failed = [t for t in readers if t.done()]
        if failed:
            failed[0].result()  # raises what ended the stream
            raise RuntimeError("an SSE stream ended early")
        await asyncio.sleep(0.05)


# --- consume+ack throughput -------------------------------------------------------------------


async def prepublish(stack: Stack, cfg: Config) -> float:
    """``messages`` 1 KiB messages in batches of 1,000 from 4 clients; seconds it took."""
    texts = payloads()
    path = f"/v1/topics/{DRAIN_TOPIC}/messages/batch"
    headers = {**stack.auth_headers(), **JSON_HEADERS}
    starts = list(range(0, cfg.messages, PUBLISH_BATCH))

    async def client(index: int) -> None:
        connection = rawhttp.Connection(HOST, stack.http_port)
        try:
            for start in starts[index::PUBLISHERS]:
                size = min(PUBLISH_BATCH, cfg.messages - start)
                batch = [{"data": texts[(start + i) % len(texts)]} for i in range(size)]
                body = msgspec.json.encode({"messages": batch})
                request = rawhttp.build_request(HOST, stack.http_port, path, headers, body)
                status, answer = await connection.send(request)
                if status != 201:
                    raise RuntimeError(f"pre-publish answered {status} {answer[:200]!r}")
        finally:
            connection.close()

    began = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(PUBLISHERS)))
    return time.perf_counter() - began


async def drain_phase(
    stack: Stack, client: httpx.AsyncClient, cfg: Config, members: list[str]
) -> consume_peers.Drain:
    """Members pull ``pull_max`` at a time and ack in batches until the group's lag is 0."""
    result = consume_peers.Drain(cfg.messages, len(members))
    seen: set[tuple[int, int]] = set()
    ackers = [Acker(stack, DRAIN_TOPIC, DRAIN_GROUP) for _ in members]
    headers = {**stack.auth_headers(), **JSON_HEADERS}
    body = msgspec.json.encode({"maxMessages": cfg.pull_max, "waitMs": 0})
    pull_s = [0.0]

    async def member(member_id: str, acker: Acker) -> None:
        path = f"/v1/topics/{DRAIN_TOPIC}/groups/{DRAIN_GROUP}/members/{member_id}/pull"
        request = rawhttp.build_request(HOST, stack.http_port, path, headers, body)
        connection = rawhttp.Connection(HOST, stack.http_port)
        empty = 0
        try:
            while empty < 2:
                sent = time.perf_counter()
                status, answer = await connection.send(request)
                pull_s[0] += time.perf_counter() - sent
                result.requests += 1
                if status != 200:
                    raise RuntimeError(f"pull answered {status} {answer[:200]!r}")
                messages = PULLED.decode(answer).messages
                if not messages:
                    # Empty: the partitions are exhausted, or maxInFlight waits for acks.
                    empty += 1
                    await acker.flush()
                    continue
                empty = 0
                for m in messages:
                    result.redelivered += m.attempt > 1
                    seen.add((m.partition, m.offset))
                    acker.add(m.partition, [m.ack_id])
            await acker.flush()
        finally:
            connection.close()

    async def progress() -> None:
        while True:
            await asyncio.sleep(10)
            acked = sum(a.acked for a in ackers)
            rate = acked / (time.perf_counter() - began)
            _step(f"  {acked:,} of {cfg.messages:,} acked ({rate:,.0f} msg/s so far)")

    began = time.perf_counter()
    reporter = asyncio.get_running_loop().create_task(progress())
    try:
        await asyncio.gather(*(member(m, a) for m, a in zip(members, ackers, strict=True)))
    finally:
        reporter.cancel()
    lag = await _lag(client, DRAIN_TOPIC, DRAIN_GROUP)
    deadline = time.monotonic() + 30
    while lag and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        lag = await _lag(client, DRAIN_TOPIC, DRAIN_GROUP)
    result.elapsed_s = time.perf_counter() - began
    result.acked = sum(a.acked for a in ackers)
    result.requests += sum(a.requests for a in ackers)
    rejections = [r for a in ackers for r in a.rejected]
    ok = lag == 0 and len(seen) == cfg.messages and result.acked == cfg.messages
    result.verified = (
        "ok: lag 0 from GET …/offsets, every offset delivered and acked"
        if ok
        else f"FAILED: lag {lag}, {len(seen)} distinct offsets delivered, {result.acked} acked"
    )
    result.extra = {
        "distinct_delivered": len(seen),
        "ack_rejections": rejections[:5],
        "pull_max": cfg.pull_max,
        "max_in_flight": cfg.max_in_flight,
        "pull_requests": result.requests - sum(a.requests for a in ackers),
        "ack_requests": sum(a.requests for a in ackers),
        # Summed over members: where each member's wall time went (pull and ack overlap).
        "pull_wait_s": round(pull_s[0], 2),
        "ack_wait_s": round(sum(a.busy_s for a in ackers), 2),
    }
    for acker in ackers:
        acker.close()
    return result


# --- orchestration ----------------------------------------------------------------------------


async def _queuecore_phases(stack: Stack, cfg: Config) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with httpx.AsyncClient(
        base_url=stack.base_url, headers=stack.auth_headers(), timeout=60
    ) as client:
        _step(f"QueueCore e2e latency at {cfg.rate_per_s} msg/s, {cfg.members} SSE members")
        with CpuWatch(stack.process_groups()) as watch:
            out["e2e"] = await e2e_phase(stack, client, cfg)
        _cpu(out["e2e"], watch)
        _step(f"  p50 {_ms(out['e2e']['p50_ms'])}, p99 {_ms(out['e2e']['p99_ms'])}")
        _step(f"QueueCore pre-publishing {cfg.messages:,} messages in batches of {PUBLISH_BATCH}")
        prepublish_s = await prepublish(stack, cfg)
        write_back()
        members = await _configure_group(client, DRAIN_TOPIC, DRAIN_GROUP, "earliest", cfg)
        _step(f"QueueCore consume+ack: {cfg.members} members pulling up to {cfg.pull_max}")
        with CpuWatch(stack.process_groups()) as watch:
            drained = await drain_phase(stack, client, cfg, members)
        drained.prepublish_s = prepublish_s
        out["drain"] = drained.as_dict()
        _cpu(out["drain"], watch)
        _step(f"  {drained.msgs_per_s:,.0f} msg/s; {drained.verified}")
    return out


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} ms"


def _cpu(result: dict[str, Any], watch: CpuWatch) -> None:
    result.update(shares(watch))


def run_queuecore(cfg: Config, root: Path, results: dict[str, Any]) -> None:
    """Start the stack, measure the reference cost and both QueueCore phases, stop the stack."""
    stack = Stack(root / "queuecore", cfg.workers)
    try:
        start_measured_stack(stack, cfg.reference_samples, results)
        for topic in (E2E_TOPIC, DRAIN_TOPIC):
            stack.create_topic(topic, "express", cfg.partitions)
        results["queuecore"] = run(_queuecore_phases(stack, cfg))
    except Exception as exc:
        results["queuecore_error"] = f"{type(exc).__name__}: {exc}"[:500]
        _step(f"QueueCore phases failed: {results['queuecore_error']} (log: {stack.serve_log})")
    finally:
        stack.stop()


def run_peers(cfg: Config, root: Path, results: dict[str, Any]) -> None:
    """Drain the same backlog from each selected, installed peer."""
    results["peers"] = peers.run_selected(
        PEERS, cfg.peers, lambda name: _run_peer(name, cfg, root / name), _step
    )


def _run_peer(name: str, cfg: Config, root: Path) -> dict[str, Any]:
    server: peers.FsyncRedis | peers.RabbitNode
    texts = payloads()
    if name == "redis":
        server = peers.FsyncRedis(root, root / "logs", free_port_block())
    else:
        server = peers.RabbitNode(root)
    try:
        _step(f"peer {name}: starting a private server, pre-publishing {cfg.messages:,}")
        server.start()
        if isinstance(server, peers.FsyncRedis):
            assert server.process is not None
            groups = {name: server.process.pid}
            drained = run(
                consume_peers.redis_drain(server.port, texts, cfg.messages, cfg.members, groups)
            )
        else:
            groups = {name: server.processes[-1].pid}  # the node; its epmd idles
            drained = run(
                consume_peers.rabbitmq_drain(
                    server.port,
                    texts,
                    cfg.messages,
                    cfg.members,
                    cfg.rabbit_prefetch,
                    cfg.rabbit_ack_every,
                    groups,
                )
            )
        result = {"status": "ok", "version": server.version(), "drain": drained.as_dict()}
        _step(f"  {drained.msgs_per_s:,.0f} msg/s; {drained.verified}")
        return result
    except Exception as exc:
        _step(f"peer {name} failed: {exc}")
        return {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"[:300]}
    finally:
        server.stop()


def parse_args(argv: list[str] | None) -> tuple[Config, argparse.Namespace]:
    """The command line; ``--quick`` is a short smoke run over 20,000 messages."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.consume", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="20,000 messages, short e2e phase")
    parser.add_argument("--messages", type=int, default=None, help="backlog (100,000; 20,000)")
    parser.add_argument("--duration", type=float, default=None, help="e2e seconds (15; 5)")
    parser.add_argument("--peers", default="redis,rabbitmq", help="comma list, or 'none'")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    parser.add_argument("--workers", type=int, default=1, help="queuecore serve processes (1)")
    parser.add_argument("--members", type=int, default=4, help="group members / consumers (4)")
    parser.add_argument("--partitions", type=int, default=8, help="partitions per topic (8)")
    parser.add_argument("--rate", type=int, default=1000, help="e2e publish msg/s (1000)")
    parser.add_argument("--keep", action="store_true", help="keep data and logs of the run")
    args = parser.parse_args(argv)
    selected = tuple(p.strip() for p in args.peers.split(",") if p.strip() not in {"", "none"})
    unknown = set(selected) - set(PEERS)
    if unknown:
        parser.error(f"unknown peer(s) {', '.join(sorted(unknown))}; known: {', '.join(PEERS)}")
    cfg = Config(
        messages=args.messages or (20_000 if args.quick else 100_000),
        members=args.members,
        partitions=args.partitions,
        pull_max=1000,
        max_in_flight=2_000,
        rate_per_s=args.rate,
        duration_s=args.duration or (5.0 if args.quick else 15.0),
        warmup_s=1.0 if args.quick else 2.0,
        drain_s=5.0 if args.quick else 10.0,
        workers=args.workers,
        reference_samples=100 if args.quick else 200,
        rabbit_prefetch=1000,
        rabbit_ack_every=100,
        peers=selected,
    )
    return cfg, args


def main(argv: list[str] | None = None) -> int:
    """Run every phase, print the table, optionally write the JSON results."""
    cfg, args = parse_args(argv)
    return run_benchmark("queuecore-consume-bench-", cfg, args, run_queuecore, run_peers, render)


if __name__ == "__main__":
    sys.exit(main())
