"""Fair scheduling's costs: a fair group's consume throughput beside an ordinary group's on the
same topic, and a publish's cost with an ``onEnqueue`` hook beside one without, in one run.

``python -m benchmarks.fair_bench`` starts a private stack (embedded services, one ``queuecore
serve`` worker, an Enterprise tenant without rate limits), then:

- **consume**: publishes ``--messages`` 1 KiB messages to one topic (``--partitions``) across 20
  fairness keys (half of them on one key, the flood) and drains them with two groups of the same
  topic, an ordinary one and a fair one, one member each pulling ``--pull`` at a time and acking
  every batch; the groups take turns in the order ordinary, fair, fair, ordinary (each drain
  starts the group afresh), so drift on a shared machine falls on both. Reported: messages per
  second of each drain, and the API process's CPU per message.
- **publish**: ``--clients`` concurrent clients publish single messages for ``--seconds`` to a
  topic without a hook, then to one whose hook assigns a fairness key, weight and throttle keys
  from the payload, alternating A B B A. Reported: messages per second, p50/p99 latency and the
  API's CPU per message.

It asserts nothing: numbers are for benchmarks/README.md, which says what machine they came from.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import msgspec
import psutil

from benchmarks import rawhttp
from benchmarks._stack import HOST, Stack
from benchmarks.consumer_client import PULLED, Acker
from benchmarks.publish import JSON_HEADERS

TOPIC = "bench.fair"
HOOK = """
function on_enqueue(msg)
  local tenant = msg.data.tenant
  return {fairness_key = tenant, weight = 1, throttle_keys = {"bench-" .. tenant}}
end
"""


def _step(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class CpuWatch:
    """CPU seconds of the API's process tree between two points."""

    def __init__(self, stack: Stack) -> None:
        assert stack.serve is not None
        self.root = psutil.Process(stack.serve.pid)

    def seconds(self) -> float:
        procs = [self.root, *self.root.children(recursive=True)]
        total = 0.0
        for proc in procs:
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue
            total += times.user + times.system
        return total


async def _request(stack: Stack, method: str, path: str, body: Any) -> dict[str, Any]:
    """One administrative call (not measured)."""
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=60) as client:
        answer = await client.request(method, path, json=body, headers=stack.auth_headers())
    if answer.status_code >= 300:
        raise RuntimeError(f"{method} {path}: {answer.status_code} {answer.text[:300]}")
    return dict(answer.json()) if answer.content else {}


async def publish_backlog(stack: Stack, messages: int) -> None:
    """``messages`` 1 KiB messages, half on one fairness key, the rest over 19 others."""
    payload = "x" * 1000
    for start in range(0, messages, 1000):
        batch = []
        for n in range(start, min(start + 1000, messages)):
            key = "flood" if n % 2 == 0 else f"tenant-{n % 19}"
            batch.append({"data": payload, "fairnessKey": key})
        await _request(stack, "POST", f"/v1/topics/{TOPIC}/messages/batch", {"messages": batch})


async def drain(stack: Stack, group: str, fair: bool, messages: int, pull: int) -> dict[str, Any]:
    """A fresh group drained by one member pulling ``pull`` at a time; msg/s and CPU/msg."""
    base = f"/v1/topics/{TOPIC}/groups/{group}"
    config: dict[str, Any] = {"startFrom": "earliest", "maxInFlight": 10_000}
    config["fairness"] = {} if fair else None
    await _request(stack, "PUT", base, config)
    member = (await _request(stack, "POST", f"{base}/members", {}))["memberId"]
    headers = {**stack.auth_headers(), **JSON_HEADERS}
    body = msgspec.json.encode({"maxMessages": pull, "waitMs": 0})
    request = rawhttp.build_request(
        HOST, stack.http_port, f"{base}/members/{member}/pull", headers, body
    )
    connection = rawhttp.Connection(HOST, stack.http_port)
    acker = Acker(stack, TOPIC, group)
    cpu = CpuWatch(stack)
    got, empty = 0, 0
    cpu_before, began = cpu.seconds(), time.perf_counter()
    try:
        while got < messages and empty < 50:
            status, answer = await connection.send(request)
            if status != 200:
                raise RuntimeError(f"pull answered {status} {answer[:200]!r}")
            delivered = PULLED.decode(answer).messages
            empty = 0 if delivered else empty + 1
            got += len(delivered)
            for m in delivered:
                acker.add(m.partition, [m.ack_id])
            if not delivered:
                await acker.flush()
        await acker.flush()
    finally:
        connection.close()
        acker.close()
    elapsed = time.perf_counter() - began
    cpu_s = cpu.seconds() - cpu_before
    await _request(stack, "DELETE", base, None)
    return {
        "group": "fair" if fair else "ordinary",
        "messages": got,
        "acked": acker.acked,
        "seconds": round(elapsed, 2),
        "msg_per_s": round(got / elapsed),
        "api_cpu_us_per_msg": round(cpu_s / max(got, 1) * 1e6),
    }


async def publish_phase(stack: Stack, topic: str, clients: int, seconds: float) -> dict[str, Any]:
    """Single-message publishes from ``clients`` connections for ``seconds``."""
    headers = {**stack.auth_headers(), **JSON_HEADERS}
    path = f"/v1/topics/{topic}/messages"
    latencies: list[float] = []
    cpu = CpuWatch(stack)

    async def client(index: int) -> None:
        connection = rawhttp.Connection(HOST, stack.http_port)
        body = msgspec.json.encode({"data": {"tenant": f"t{index % 7}", "n": index}})
        request = rawhttp.build_request(HOST, stack.http_port, path, headers, body)
        try:
            while time.perf_counter() < deadline:
                sent = time.perf_counter()
                status, answer = await connection.send(request)
                if status != 201:
                    raise RuntimeError(f"publish answered {status} {answer[:200]!r}")
                latencies.append(time.perf_counter() - sent)
        finally:
            connection.close()

    cpu_before = cpu.seconds()
    deadline = time.perf_counter() + seconds
    await asyncio.gather(*(client(i) for i in range(clients)))
    cpu_s = cpu.seconds() - cpu_before
    ordered = sorted(latencies)
    return {
        "topic": topic,
        "messages": len(latencies),
        "msg_per_s": round(len(latencies) / seconds),
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(ordered[int(len(ordered) * 0.99) - 1] * 1000, 2),
        "api_cpu_us_per_msg": round(cpu_s / max(len(latencies), 1) * 1e6),
    }


async def run_all(stack: Stack, options: argparse.Namespace) -> dict[str, Any]:
    """Both comparisons, interleaved."""
    _step(f"publishing {options.messages:,} messages to {TOPIC}")
    await publish_backlog(stack, options.messages)
    consume = []
    for round_number, fair in enumerate((False, True, True, False)):
        _step(f"draining with the {'fair' if fair else 'ordinary'} group")
        consume.append(await drain(stack, f"g{round_number}", fair, options.messages, options.pull))
    publish = []
    for topic in ("bench.plain", "bench.hooked", "bench.hooked", "bench.plain"):
        _step(f"publishing to {topic} for {options.seconds} s")
        publish.append(await publish_phase(stack, topic, options.clients, options.seconds))
    return {"consume": consume, "publish": publish}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--pull", type=int, default=100)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="qc-fair-") as root:
        stack = Stack(Path(root), 1)
        try:
            stack.start_services()
            stack.start_api()
            stack.create_tenant()
            stack.create_topic(TOPIC, "express", options.partitions)
            stack.create_topic("bench.plain", "express", 1)
            stack.create_topic("bench.hooked", "express", 1)
            asyncio.run(_request(stack, "PATCH", "/v1/topics/bench.hooked", {"onEnqueue": HOOK}))
            results = asyncio.run(run_all(stack, options))
        finally:
            stack.stop()
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
