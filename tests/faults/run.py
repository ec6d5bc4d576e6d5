"""A fault run: private cluster, workload, nemesis, final read, checker, JSON summary.

    python -m tests.faults.run --seed 13 --faults 30 --duration 1200 --ops 100000 --out fault-run

``--duration`` is the fault period; producers go on (without faults) until ``--ops`` operations
are recorded, then consumers drain their groups and every partition is read back. The history
(``history.jsonl``) and the summary (``summary.json``) are written to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from functools import partial
from pathlib import Path
from typing import Any

from tests.faults.checker import check
from tests.faults.cluster import TARGET_KINDS, Cluster, Nemesis
from tests.faults.history import Recorder
from tests.faults.kafka_producers import kafka_producer
from tests.faults.workload import DELIVERY, Config, Workload, run_all
from tests.support.tenancy import new_organisation

DRAIN_S = 60.0


def run(
    root: Path,
    seed: int,
    faults: int,
    duration_s: float,
    min_ops: int = 0,
    producers: int = 4,
    targets: tuple[str, ...] = TARGET_KINDS,
) -> dict[str, Any]:
    """One whole run in ``root``; returns the summary (also written to ``root/summary.json``)."""
    root.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    cluster = Cluster.start(root)
    try:
        org = new_organisation(cluster.postgres.url, tier="pro")
        recorder = Recorder()
        config = Config(seed=seed, producers=producers, min_ops=min_ops)
        urls = [api.url for api in cluster.apis]
        workload = Workload(urls, org.keys["production"].secret, recorder, config)
        workload.bootstraps = [api.bootstrap for api in cluster.apis]
        nemesis = Nemesis(cluster, seed, targets, recorder=recorder)
        _drive(workload, nemesis, faults, duration_s)
    finally:
        cluster.stop()
    recorder.write(root / "history.jsonl")
    summary = summarise(recorder.events, nemesis, seed, time.monotonic() - began)
    (root / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def _drive(workload: Workload, nemesis: Nemesis, faults: int, duration_s: float) -> None:
    """The workload in its own thread and event loop; the nemesis here (services die with the
    thread that started them, and this one started them)."""
    ready, failure = threading.Event(), []

    def work() -> None:
        try:
            asyncio.run(_workload_main(workload, ready))
        except BaseException as exc:
            failure.append(exc)
            ready.set()

    thread = threading.Thread(target=work, name="workload")
    thread.start()
    ready.wait()
    try:
        if not failure:
            nemesis.run(faults, duration_s, workload.recorder.now_s)
    finally:
        workload.stop.set()
        thread.join()
    if failure:
        raise failure[0]


async def _workload_main(workload: Workload, ready: threading.Event) -> None:
    workload.open_clients()
    try:
        await workload.setup()
        ready.set()
        await run_all([lambda: _produce(workload), lambda: _consume(workload)])
        await workload.final_read()
    finally:
        await workload.close_clients()


async def _produce(workload: Workload) -> None:
    """Producers until the nemesis is done and enough operations are recorded; then drain."""
    producers = [partial(workload.producer, n) for n in range(workload.config.producers)]
    producers += [
        partial(kafka_producer, workload, n) for n in range(workload.config.kafka_producers)
    ]
    await run_all(producers)
    await _drain(workload)
    workload.consumers_stop.set()


async def _drain(workload: Workload) -> None:
    """Let consumers catch up (lag 0 on every group) for at most ``DRAIN_S``."""
    print(f"draining after {workload.ops()} operations", file=sys.stderr)
    deadline = asyncio.get_running_loop().time() + DRAIN_S
    while asyncio.get_running_loop().time() < deadline:
        if all(workload.lag.get(topic, 1) == 0 for topic in DELIVERY):
            return
        await asyncio.sleep(0.5)


async def _consume(workload: Workload) -> None:
    members = [partial(workload.pull_member, t) for t in DELIVERY]
    members += [partial(workload.sse_member, t) for t in DELIVERY]
    await run_all([*members, workload.watch_offsets])


def summarise(
    events: list[dict[str, Any]], nemesis: Nemesis, seed: int, elapsed_s: float
) -> dict[str, Any]:
    """Operations, outcomes, faults by kind, anomalies by name (with a few details each)."""
    report = check(events)
    outcomes: dict[str, Counter[str]] = defaultdict(Counter)
    kinds = {e["id"]: e["op"] for e in events if e["type"] == "invoke"}
    kafka = {e["id"] for e in events if e["type"] == "invoke" and e["process"].startswith("kafka")}
    for event in events:
        if event["type"] == "complete":
            outcomes[kinds[event["id"]]][event["outcome"]] += 1
            if event["id"] in kafka:
                outcomes["kafkaProduce"][event["outcome"]] += 1
    return {
        "seed": seed,
        "elapsedS": round(elapsed_s, 1),
        "operations": sum(report.counts.values()),
        "operationsByKind": report.counts,
        "outcomes": {op: dict(c) for op, c in outcomes.items()},
        "faults": len(nemesis.done),
        "faultsByKind": nemesis.by_kind(),
        "faultLog": [vars(f) for f in nemesis.done],
        "checked": dict(report.checked),
        "anomalies": report.by_name(),
        "anomalyDetails": {name: found[:5] for name, found in report.anomalies.items()},
    }


def main() -> None:
    """Command line entry: run and print the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--faults", type=int, default=30)
    parser.add_argument("--duration", type=float, default=1200, help="fault period, seconds")
    parser.add_argument("--ops", type=int, default=100_000, help="minimum operations")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument(
        "--targets", default=",".join(TARGET_KINDS), help="what to break, e.g. postgres,s3"
    )
    parser.add_argument("--out", type=Path, default=None, help="directory for history and summary")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="queuecore-faults-"))
    targets = tuple(t for t in args.targets.split(",") if t in TARGET_KINDS)
    summary = run(out, args.seed, args.faults, args.duration, args.ops, args.producers, targets)
    print(json.dumps({k: v for k, v in summary.items() if k != "faultLog"}, indent=2))
    print(f"history and summary in {out}")
    raise SystemExit(0 if not any(summary["anomalies"].values()) else 1)


if __name__ == "__main__":
    main()
