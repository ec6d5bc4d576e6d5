"""Two builds side by side in one run: ``python -m benchmarks.publish --ab PATH``.

``PATH`` is another worktree of this repository (for example the previous ``main``). Each build
gets its own private stack (services, ``queuecore serve`` started from its own directory, a
tenant, the topics); the phases then run interleaved, A then B then B then A…, for ``--rounds``
rounds, so a disturbance of the shared machine hits both builds alike. CPU per message (the API
process tree's CPU time ÷ messages stored) is the figure to trust on a shared machine; rates and
latencies come with the noise of the moment.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import publish, tenants
from benchmarks._stack import Stack
from benchmarks.cpu import CpuWatch
from benchmarks.report import machine

PHASES = ("single", "batched", "noisy")
METRICS = ("msgs_per_s", "api_cpu_us_per_msg", "quiet_p99_ms", "quiet_p99_ratio")


def main(cfg: publish.Config, args: argparse.Namespace) -> int:
    """Run the A/B comparison; print its table; optionally write the JSON."""
    root = Path(tempfile.mkdtemp(prefix="queuecore-ab-"))
    other = Path(args.ab).resolve()
    builds = {
        "this": Stack(root / "this", cfg.workers),
        "other": Stack(root / "other", cfg.workers),
    }
    builds["other"].repo_root = other
    results: dict[str, Any] = {"config": {**vars(cfg), "other": str(other)}, "machine": machine()}
    try:
        with CpuWatch() as watch:
            for name, stack in builds.items():
                publish._step(f"A/B: starting the {name} build's stack ({stack.repo_root})")
                stack.start_services()
                stack.start_api()
                stack.create_tenant()
                for topic in ("bench.batched", "bench.single"):
                    stack.create_topic(topic, "express")
            results["rounds"] = publish.run(_interleaved(builds, cfg, args.rounds))
        results["others_cpu_pct"] = round(watch.others_pct, 1)
    finally:
        for stack in builds.values():
            stack.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    results["summary"] = summarise(results["rounds"])
    print(render(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


async def _interleaved(
    builds: dict[str, Stack], cfg: publish.Config, rounds: int
) -> list[dict[str, Any]]:
    texts = publish.payloads()
    batches = [
        publish._encode({"messages": [{"data": p} for p in texts[i : i + publish.BATCH]]})
        for i in range(0, len(texts), publish.BATCH)
    ]
    singles = [publish._encode({"data": p}) for p in texts]
    out = []
    for number in range(rounds):
        order = list(builds) if number % 2 == 0 else list(reversed(builds))
        for phase in PHASES:
            if phase == "noisy" and not cfg.noisy:
                continue
            for name in order:
                stack = builds[name]
                publish._step(f"A/B round {number + 1}: {phase} publish, {name} build")
                if phase == "noisy":
                    out.append(
                        {
                            "round": number + 1,
                            "phase": phase,
                            "build": name,
                            **await _noisy(stack, cfg),
                        }
                    )
                    continue
                clients = publish._connections(stack, cfg.clients)
                bodies = batches if phase == "batched" else singles
                send = publish._sender(
                    clients,
                    publish._requests(stack, f"bench.{phase}", bodies, phase == "batched"),
                )
                result = await publish._throughput_phase(stack, f"bench.{phase}", send, cfg)
                publish._close(clients)
                out.append({"round": number + 1, "phase": phase, "build": name, **result})
    return out


async def _noisy(stack: Stack, cfg: publish.Config) -> dict[str, Any]:
    result = await tenants.noisy_neighbour(stack, cfg.duration_s, cfg.warmup_s)
    publish._step(tenants.summary(result))
    return {
        "quiet_p99_ms": result["beside"].get("p99_ms"),
        "quiet_p99_ratio": result.get("p99_ratio"),
        "msgs_per_s": result["flood"].get("msgs_per_s"),
        "api_cpu_us_per_msg": result.get("api_cpu_us_per_msg"),
        "detail": result,
    }


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of each metric per phase and build, and this build ÷ the other."""
    out: dict[str, Any] = {}
    for phase in PHASES:
        row: dict[str, Any] = {}
        for metric in METRICS:
            medians = {}
            for build in ("this", "other"):
                values = [
                    r[metric]
                    for r in rounds
                    if r["phase"] == phase and r["build"] == build and r.get(metric) is not None
                ]
                medians[build] = statistics.median(values) if values else None
            ratio = (
                medians["this"] / medians["other"]
                if medians["this"] is not None and medians["other"]
                else None
            )
            row[metric] = {**medians, "ratio": None if ratio is None else round(ratio, 3)}
        out[phase] = row
    return out


def render(results: dict[str, Any]) -> str:
    """The A/B table: medians over the rounds, and this build ÷ the other."""
    lines = [
        f"## A/B: this build against {results['config']['other']}",
        "",
        "| phase | metric | this build | other build | this ÷ other |",
        "| --- | --- | --- | --- | --- |",
    ]
    for phase, row in results["summary"].items():
        for metric, values in row.items():
            if values["this"] is None and values["other"] is None:
                continue  # not a figure of this phase
            cells = [_num(values["this"]), _num(values["other"]), _num(values["ratio"])]
            lines.append(f"| {phase} | {metric} | " + " | ".join(cells) + " |")
    single = results["summary"]["single"]["api_cpu_us_per_msg"]
    per_core = {b: tenants.pro_tenants_per_core(single[b]) for b in ("this", "other")}
    lines += [
        "",
        "Pro tenants at their full publish rate (1,000 single-message publishes a second) per "
        f"API core: this build {_num(per_core['this'])}, other {_num(per_core['other'])}.",
        f"Medians over {results['config']['duration_s']:g}-s phases, interleaved; others' CPU "
        f"during the run {results.get('others_cpu_pct')}% of the cores (a shared machine makes "
        "rates noisy: compare CPU per message).",
    ]
    return "\n".join(lines) + "\n"


def _num(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
