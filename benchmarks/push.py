"""Push delivery to a local HTTP endpoint: deliveries per second, and what push adds to a publish.

``python -m benchmarks.push [--messages N] [--max-in-flight M] [--rate R] [--duration S]
[--json out.json]`` starts a private stack (PostgreSQL, SeaweedFS, Redis, one ``queuecore
serve`` worker, one ``queuecore pusher``) and an endpoint in a process of its own (a minimal
keep-alive HTTP/1.1 server answering 204), then runs two phases:

- **throughput**: N messages (200 B each) are published first, in batches, to a 3-partition
  topic; then a push group is turned on from the earliest offset with ``maxInFlight`` M. Reported:
  deliveries per second from the first POST to the last, the time to drain, and the pusher's CPU
  per delivery (its process, from ``/proc``).
- **latency**: single-message publishes at R per second (open loop) to a push group with the
  default ``maxInFlight``; each message carries its index. Reported: the publish's own latency
  (send → 201), publish → endpoint (send → the POST's arrival), and what push adds (201 → the
  POST's arrival), p50 and p99.

The endpoint, the load generator, the API, the pusher, PostgreSQL and SeaweedFS share the
machine: on a 2-core box shared with other work the figures say how this machine did, not what
QueueCore can do. A script, not a test: nothing in ``tests/`` asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
import psutil

from benchmarks import rawhttp
from benchmarks._stack import REPO_ROOT, Stack
from infra.embedded import HOST, die_with_parent, free_port_block

BATCH = 100
PAD = "x" * 160  # with the index and the stamp: about 200 B of data per message


def _step(message: str) -> None:
    print(f"[push-bench] {message}", file=sys.stderr, flush=True)


# --- the endpoint, in a process of its own ------------------------------------------------------


def endpoint_main(port: int, pipe: Connection) -> None:
    """Serve POSTs on ``port`` (204 each), recording (index, arrival); answer ``pipe``'s asks."""
    arrivals: list[tuple[int, float]] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length)
                now = time.time()
                arrivals.append((int(json.loads(body)["data"]["i"]), now))
                writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(serve, HOST, port)
        loop = asyncio.get_running_loop()
        while True:
            ask = await loop.run_in_executor(None, pipe.recv)
            if ask == "stop":
                server.close()
                return
            pipe.send(list(arrivals))
            if ask == "take":
                arrivals.clear()

    asyncio.run(main())


class Endpoint:
    """The endpoint process and what it received."""

    def __init__(self) -> None:
        self.port = free_port_block()
        self._pipe, child = multiprocessing.Pipe()
        self.process = multiprocessing.get_context("fork").Process(
            target=endpoint_main, args=(self.port, child), daemon=True
        )
        self.process.start()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/push"

    def arrivals(self, take: bool = False) -> list[tuple[int, float]]:
        self._pipe.send("take" if take else "peek")
        return list(self._pipe.recv())

    def stop(self) -> None:
        self._pipe.send("stop")
        self.process.join(5)


# --- the stack: the API and a pusher ------------------------------------------------------------


def start_pusher(stack: Stack) -> subprocess.Popen[bytes]:
    """``queuecore pusher`` on the stack's services."""
    log = stack.root / "logs" / "pusher.log"
    env = {
        **stack.env(),
        "QUEUECORE_PUSHER_REFRESH_MS": "200",
        "QUEUECORE_LOG_LEVEL": os.environ.get("QUEUECORE_LOG_LEVEL", "WARNING"),
    }
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "infra.cli", "pusher"],
            env=env,
            cwd=REPO_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent(signal.SIGTERM),
        )


def configure_push(stack: Stack, topic: str, endpoint: str, max_in_flight: int) -> None:
    """A push group from the earliest offset (anything but 200 stops the run)."""
    body = {
        "startFrom": "earliest",
        "ackTimeout": "2m",
        "push": {"endpoint": endpoint, "maxInFlight": max_in_flight},
    }
    answer = httpx.put(
        f"{stack.base_url}/v1/topics/{topic}/groups/push",
        json=body,
        headers=stack.auth_headers(),
        timeout=30,
    )
    if answer.status_code != 200:
        raise RuntimeError(f"push group on {topic}: {answer.status_code} {answer.text}")


def lag(stack: Stack, topic: str) -> int:
    answer = httpx.get(
        f"{stack.base_url}/v1/topics/{topic}/groups/push", headers=stack.auth_headers(), timeout=30
    )
    return sum(p["lag"] for p in answer.json()["partitions"])


# --- the phases ----------------------------------------------------------------------------------


async def prefill(stack: Stack, topic: str, count: int) -> None:
    """``count`` messages in batches of 100, four requests at a time."""
    headers = {**stack.auth_headers(), "Content-Type": "application/json"}
    path = f"/v1/topics/{topic}/messages/batch"
    connections = [rawhttp.Connection(HOST, stack.http_port) for _ in range(4)]

    async def batches(worker: int) -> None:
        for start in range(worker * BATCH, count, BATCH * len(connections)):
            items = [
                {"data": {"i": i, "pad": PAD}} for i in range(start, min(start + BATCH, count))
            ]
            body = json.dumps({"messages": items}).encode()
            request = rawhttp.build_request(HOST, stack.http_port, path, headers, body)
            status, answer = await connections[worker].send(request)
            if status != 201:
                raise RuntimeError(f"prefill: {status} {answer[:200]!r}")

    try:
        await asyncio.gather(*(batches(w) for w in range(len(connections))))
    finally:
        for connection in connections:
            connection.close()


def throughput(
    stack: Stack, pusher: psutil.Process, endpoint: Endpoint, count: int, max_in_flight: int
) -> dict[str, Any]:
    """Drain a backlog of ``count`` to the endpoint."""
    topic = "bench.push.backlog"
    stack.create_topic(topic, "express", partitions=3)
    _step(f"throughput: publishing {count} messages")
    asyncio.run(prefill(stack, topic, count))
    endpoint.arrivals(take=True)
    cpu_before = _cpu_s(pusher)
    started = time.time()
    configure_push(stack, topic, endpoint.url, max_in_flight)
    _step(f"throughput: push on (maxInFlight {max_in_flight}), draining")
    deadline = time.monotonic() + max(120.0, count / 50)
    while len({i for i, _ in endpoint.arrivals()}) < count and time.monotonic() < deadline:
        time.sleep(0.2)
    arrivals = endpoint.arrivals(take=True)
    distinct = {i for i, _ in arrivals}
    cpu_s = _cpu_s(pusher) - cpu_before
    times = sorted(t for _, t in arrivals)
    span = max(times[-1] - times[0], 1e-9) if len(times) > 1 else float("nan")
    return {
        "messages": count,
        "delivered": len(distinct),
        "posts": len(arrivals),  # more than delivered: a message pushed again
        "max_in_flight": max_in_flight,
        "deliveries_per_s": round(len(arrivals) / span, 1),
        "drain_s": round(times[-1] - started, 2) if times else None,
        "pusher_cpu_us_per_delivery": round(cpu_s * 1e6 / max(len(arrivals), 1), 1),
        "lag_after": lag(stack, topic),
    }


async def publish_at_rate(
    stack: Stack, topic: str, rate: float, duration_s: float
) -> dict[int, tuple[float, float]]:
    """Single publishes at ``rate`` a second (open loop): index → (sent, answered)."""
    headers = {**stack.auth_headers(), "Content-Type": "application/json"}
    path = f"/v1/topics/{topic}/messages"
    idle = [rawhttp.Connection(HOST, stack.http_port) for _ in range(16)]
    stamps: dict[int, tuple[float, float]] = {}

    async def one(index: int) -> None:
        connection = idle.pop() if idle else rawhttp.Connection(HOST, stack.http_port)
        body = json.dumps({"data": {"i": index, "pad": PAD}}).encode()
        request = rawhttp.build_request(HOST, stack.http_port, path, headers, body)
        sent = time.time()
        status, _ = await connection.send(request)
        if status == 201:
            stamps[index] = (sent, time.time())
        idle.append(connection)

    tasks = []
    start = time.monotonic()
    for index in range(int(rate * duration_s)):
        delay = start + index / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(index)))
    await asyncio.gather(*tasks)
    for connection in idle:
        connection.close()
    return stamps


def latency(stack: Stack, endpoint: Endpoint, rate: float, duration_s: float) -> dict[str, Any]:
    """Publish → endpoint at a steady rate."""
    topic = "bench.push.latency"
    stack.create_topic(topic, "express", partitions=3)
    configure_push(stack, topic, endpoint.url, 10)
    time.sleep(1.0)  # the pusher joins the new group (it looks every 0.2 s)
    endpoint.arrivals(take=True)
    _step(f"latency: {rate:g} publishes a second for {duration_s:g} s")
    stamps = asyncio.run(publish_at_rate(stack, topic, rate, duration_s))
    deadline = time.monotonic() + 30
    while len(endpoint.arrivals()) < len(stamps) and time.monotonic() < deadline:
        time.sleep(0.2)
    first: dict[int, float] = {}
    for index, arrived in endpoint.arrivals(take=True):
        first.setdefault(index, arrived)
    matched = [(stamps[i], first[i]) for i in stamps if i in first]
    publish_ms = [(answered - sent) * 1000 for (sent, answered), _ in matched]
    to_endpoint_ms = [(arrived - sent) * 1000 for (sent, _), arrived in matched]
    added_ms = [(arrived - answered) * 1000 for (_, answered), arrived in matched]
    return {
        "rate": rate,
        "published": len(stamps),
        "pushed": len(matched),
        "publish_ms": _percentiles(publish_ms),
        "publish_to_endpoint_ms": _percentiles(to_endpoint_ms),
        "added_by_push_ms": _percentiles(added_ms),
    }


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if len(values) < 2:
        return {"p50": None, "p99": None}
    cuts = statistics.quantiles(values, n=100)
    return {"p50": round(cuts[49], 2), "p99": round(cuts[98], 2)}


def _cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def run(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Start everything, run both phases, stop everything."""
    # The API and the pusher: the endpoint is on 127.0.0.1, and secrets are sealed as in production.
    os.environ["QUEUECORE_WEBHOOKS_ALLOW_PRIVATE"] = "true"
    os.environ.setdefault("QUEUECORE_SECRETS_KEY", secrets.token_hex(32))
    stack = Stack(root, workers=1)
    endpoint = Endpoint()
    pusher: subprocess.Popen[bytes] | None = None
    try:
        _step("starting PostgreSQL, SeaweedFS, Redis, queuecore serve and queuecore pusher")
        stack.start_services()
        stack.start_api()
        stack.create_tenant()
        pusher = start_pusher(stack)
        watched = psutil.Process(pusher.pid)
        results = {
            "throughput": throughput(stack, watched, endpoint, args.messages, args.max_in_flight),
            "latency": latency(stack, endpoint, args.rate, args.duration),
        }
    finally:
        if pusher is not None:
            pusher.terminate()
            pusher.wait(30)
        endpoint.stop()
        stack.stop()
    return results


def main(argv: list[str] | None = None) -> int:
    """Command line entry: run, print the figures (and write JSON when asked)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000, help="backlog to drain")
    parser.add_argument("--max-in-flight", type=int, default=200, help="the throughput group's")
    parser.add_argument("--rate", type=float, default=100.0, help="publishes a second (latency)")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of the latency phase")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="qc-push-bench-") as root:
        results = run(Path(root), args)
    t, lat = results["throughput"], results["latency"]
    print(
        f"throughput: {t['delivered']}/{t['messages']} delivered ({t['posts']} POSTs), "
        f"{t['deliveries_per_s']} deliveries/s at maxInFlight {t['max_in_flight']}, "
        f"drained in {t['drain_s']} s, pusher CPU {t['pusher_cpu_us_per_delivery']} µs/delivery"
    )
    for name in ("publish_ms", "publish_to_endpoint_ms", "added_by_push_ms"):
        print(f"latency {name:<24} p50 {lat[name]['p50']:>8} ms   p99 {lat[name]['p99']:>8} ms")
    print(f"latency: {lat['pushed']}/{lat['published']} pushed at {lat['rate']:g}/s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
