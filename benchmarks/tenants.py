"""Many tenants on one replica: the noisy-neighbour phase and how many Pro tenants a core carries.

The noisy-neighbour phase gives two Pro organisations a topic each. The quiet one publishes
single messages on an open loop at :data:`QUIET_RATE` a second, first alone, then while the other
floods its own topic with batches of 100 from a process of its own (:mod:`benchmarks.flood`) as
fast as the replica answers, up to its tier's rate limit. The quiet tenant's p50/p99 alone and
beside the flood, and their ratio, say whether one organisation's load delays another's
publishes.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
from typing import Any

import msgspec

from benchmarks import rawhttp
from benchmarks._stack import REPO_ROOT, Stack
from benchmarks.cpu import CpuWatch, shares
from benchmarks.load import open_loop, payloads
from infra.embedded import HOST

QUIET_RATE = 50  # the quiet tenant's publishes a second
QUIET_CONNECTIONS = 32
MIN_QUIET_S = 10.0  # at 50 a second, 500 samples: a p99 worth the name
FLOOD_CLIENTS = 16
PRO_PUBLISH_PER_S = 1000  # a Pro key's publish requests a second (tenants.tiers)
TOPICS = {"quiet": "bench.quiet", "flood": "bench.flood"}


def pro_tenants_per_core(api_cpu_us_per_msg: float | None) -> float | None:
    """Pro tenants publishing single messages at their full rate that one API core carries."""
    if not api_cpu_us_per_msg:
        return None
    return 1e6 / (api_cpu_us_per_msg * PRO_PUBLISH_PER_S)


async def noisy_neighbour(stack: Stack, duration_s: float, warmup_s: float) -> dict[str, Any]:
    """The quiet tenant's latency alone and beside a flooding one (see the module's doc)."""
    keys = {role: await asyncio.to_thread(stack.tier_key, "pro") for role in TOPICS}
    suffix = secrets.token_hex(3)  # each run of the phase has topics of its own
    topics = {role: f"{name}.{suffix}" for role, name in TOPICS.items()}
    for role, topic in topics.items():
        stack.create_topic(topic, "express", key=keys[role])
    seconds = max(duration_s, MIN_QUIET_S)
    quiet = _QuietProbe(stack, keys["quiet"], topics["quiet"])
    try:
        alone = await _measured(stack, quiet, seconds, warmup_s)
        stored_before = _stored(stack, topics)
        with CpuWatch(stack.process_groups()) as watch:
            flood = _start_flood(stack, keys["flood"], topics["flood"], seconds + 2 * warmup_s + 2)
            try:
                await asyncio.sleep(warmup_s)  # the flood's connections are up and busy
                beside = await _measured(stack, quiet, seconds, warmup_s)
            finally:
                flood_counts = _flood_result(flood)
        stored = _stored(stack, topics, settle=True) - stored_before
    finally:
        quiet.close()
    out: dict[str, Any] = {"alone": alone, "beside": beside, "flood": flood_counts}
    out["messages_stored"] = stored
    if stored:  # the API's CPU per message while the flood ran, both tenants' messages
        out["api_cpu_us_per_msg"] = round(watch.groups_cpu_s.get("api", 0.0) * 1e6 / stored, 1)
    if alone.get("p99_ms") and beside.get("p99_ms"):
        out["p99_ratio"] = round(beside["p99_ms"] / alone["p99_ms"], 2)
        out["p50_ratio"] = round(beside["p50_ms"] / alone["p50_ms"], 2)
    return out


class _QuietProbe:
    """Single-message publishes of the quiet tenant, one keep-alive connection per request."""

    def __init__(self, stack: Stack, key: str, topic: str) -> None:
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        path = f"/v1/topics/{topic}/messages"
        self.requests = [
            rawhttp.build_request(
                HOST, stack.http_port, path, headers, msgspec.json.encode({"data": p})
            )
            for p in payloads()
        ]
        self.pool = rawhttp.Pool(HOST, stack.http_port, QUIET_CONNECTIONS)
        self.sent = 0

    async def __call__(self) -> float | None:
        self.sent += 1
        status, body = await self.pool.send(self.requests[self.sent % len(self.requests)])
        if status != 201:
            raise RuntimeError(f"quiet publish answered {status}: {body[:200]!r}")
        return None

    def close(self) -> None:
        self.pool.close()


async def _measured(
    stack: Stack, probe: _QuietProbe, seconds: float, warmup_s: float
) -> dict[str, Any]:
    with CpuWatch(stack.process_groups()) as watch:
        measured = await open_loop(probe, QUIET_RATE, seconds, warmup_s, QUIET_CONNECTIONS, 5.0)
    result = measured.as_dict()
    result.update(shares(watch))
    result["api_cpu_s"] = round(watch.groups_cpu_s.get("api", 0.0), 3)
    return result


def _stored(stack: Stack, topics: dict[str, str], settle: bool = False) -> int:
    """Messages stored in both tenants' topics (once the count stops moving, with ``settle``)."""
    counted = stack.settled if settle else stack.committed
    return sum(counted(topic)[1] for topic in topics.values())


def _start_flood(stack: Stack, key: str, topic: str, seconds: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks.flood",
            str(stack.http_port),
            key,
            topic,
            "--clients",
            str(FLOOD_CLIENTS),
            "--seconds",
            f"{seconds:g}",
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
    )


def _flood_result(flood: subprocess.Popen[bytes]) -> dict[str, Any]:
    try:
        out, _ = flood.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        flood.kill()
        flood.wait()
        return {"error": "the flood did not end"}
    try:
        counts: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": f"no result (exit {flood.returncode})"}
    if counts.get("elapsed_s"):
        counts["msgs_per_s"] = round(counts["messages"] / counts["elapsed_s"], 1)
    return counts


def summary(result: dict[str, Any]) -> str:
    """One progress line for the phase."""
    alone, beside, flood = result["alone"], result["beside"], result["flood"]
    return (
        f"  quiet p50/p99 alone {alone.get('p50_ms', 0):.3g}/{alone.get('p99_ms', 0):.3g} ms, "
        f"beside the flood {beside.get('p50_ms', 0):.3g}/{beside.get('p99_ms', 0):.3g} ms "
        f"(p99 ratio {result.get('p99_ratio')}); flood {flood.get('msgs_per_s')} msg/s, "
        f"{flood.get('limited')} answered 429"
    )
