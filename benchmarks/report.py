"""The markdown report of one run, built only from the run's JSON results (so it can be redrawn)."""

from __future__ import annotations

import os
import platform
from typing import Any

import psutil

MIB = 1024 * 1024
NOT_MEASURED = "—"
SINGLE_CEILING_SHARE = 0.8  # target: single-message publish against its ceiling
EXPRESS_P99_MS = 10.0  # target: express publish p99 at the open-loop rate
NOISY_P99_RATIO = 1.5  # target: a quiet tenant's p99 beside a flood ÷ its p99 alone
API_CPU_TARGET_US = {"single": 200.0, "batched": 8.0}  # target: API CPU per message
PRO_PUBLISH_PER_S = 1000  # a Pro key's publish requests a second
PEER_LABELS = {
    ("redis", "batched"): "Redis Streams, appendfsync always, 100 XADD per pipeline",
    ("redis", "single"): "Redis Streams, appendfsync always, one XADD per round trip",
    ("rabbitmq", "batched"): "RabbitMQ quorum queue, confirms awaited per 100",
    ("rabbitmq", "single"): "RabbitMQ quorum queue, confirm awaited per message",
}


def machine() -> dict[str, Any]:
    """Cores, memory, CPU model and load of the machine, taken before the run starts."""
    model = NOT_MEASURED
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next(
                (
                    line.split(":", 1)[1].strip()
                    for line in cpuinfo
                    if line.startswith("model name")
                ),
                model,
            )
    except OSError:
        pass
    return {
        "cpu_model": model,
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "ram_gib": round(psutil.virtual_memory().total / 1024**3, 1),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def render(results: dict[str, Any]) -> str:
    """The whole report: table, reference cost, notes, machine."""
    lines = ["## QueueCore publish benchmark", ""]
    lines += _table(results)
    lines += ["", *reference_lines(results), "", *_notes(results), "", *_machine_lines(results)]
    return "\n".join(lines) + "\n"


def _table(results: dict[str, Any]) -> list[str]:
    header = "| metric | QueueCore | compared with | its value | QueueCore ÷ it | target | result |"
    rows = [header, "|" + " --- |" * 7]
    rows_of = _throughput_rows(results) + _latency_rows(results) + _cost_rows(results)
    for row in rows_of + _tenancy_rows(results):
        rows.append("| " + " | ".join(row) + " |")
    return rows


def _qc(results: dict[str, Any], *path: str) -> Any:
    node: Any = results.get("queuecore", {})
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _peer(results: dict[str, Any], name: str) -> dict[str, Any]:
    return dict(results.get("peers", {}).get(name, {"status": "not selected"}))


def _throughput_rows(results: dict[str, Any]) -> list[list[str]]:
    clients = results["config"]["clients"]
    batched = _qc(results, "batched")
    single = _qc(results, "single")
    batch_metric = f"batched publish, 1 KiB x 100/request, {clients} clients"
    single_metric = f"single-message publish, 1 KiB, {clients} clients"
    return [
        _versus(batch_metric, batched, results, "redis", "batched", "≥ 1x Redis Streams", True),
        _versus(batch_metric, batched, results, "rabbitmq", "batched", NOT_MEASURED, False),
        _versus(single_metric, single, results, "rabbitmq", "single", "≥ 1x RabbitMQ", True),
        _versus(single_metric, single, results, "redis", "single", NOT_MEASURED, False),
        _single_versus_ceiling(single_metric, single, results),
    ]


def _single_versus_ceiling(
    metric: str, ours: dict[str, Any] | None, results: dict[str, Any]
) -> list[str]:
    """Target: single-message publish ≥ 0.8x what PUT + commit allow its closed-loop clients."""
    ceiling = _ceiling_msgs_per_s(results)
    label = "its ceiling: clients ÷ (S3 PUT + commit, p50s of this run)"
    target = f"≥ {SINGLE_CEILING_SHARE:g}x"
    if ours is None or ceiling is None:
        return [metric, _missing(results), label, NOT_MEASURED, NOT_MEASURED, target, "n/a"]
    ratio = ours["msgs_per_s"] / ceiling
    verdict = "PASS" if ratio >= SINGLE_CEILING_SHARE else "FAIL"
    return [metric, _rate(ours), label, f"{ceiling:,.0f} msg/s", _ratio(ratio), target, verdict]


def _ceiling_msgs_per_s(results: dict[str, Any]) -> float | None:
    ref = results.get("reference")
    if not ref:
        return None
    return float(results["config"]["clients"] / (ref["put_p50_ms"] + ref["commit_p50_ms"]) * 1000)


def _versus(
    metric: str,
    ours: dict[str, Any] | None,
    results: dict[str, Any],
    peer_name: str,
    phase: str,
    target: str,
    judged: bool,
) -> list[str]:
    peer = _peer(results, peer_name)
    label = PEER_LABELS[(peer_name, phase)]
    ours_text = _rate(ours) if ours else _missing(results)
    if peer.get("status") != "ok":
        why = f"{peer.get('status')}" + (f" ({peer['reason']})" if peer.get("reason") else "")
        result = f"n/a: peer {peer.get('status')}" if judged else "info"
        return [metric, ours_text, label, why, NOT_MEASURED, target, result]
    theirs = peer[phase]
    ratio = ours["msgs_per_s"] / theirs["msgs_per_s"] if ours and theirs["msgs_per_s"] else None
    verdict = "info"
    if judged:
        verdict = "n/a" if ratio is None else ("PASS" if ratio >= 1 else "FAIL")
    return [metric, ours_text, label, _rate(theirs), _ratio(ratio), target, verdict]


def _latency_rows(results: dict[str, Any]) -> list[list[str]]:
    rate = results["config"]["rate_per_s"]
    reference = results.get("reference")
    rows = []
    for latency_class in ("express", "standard"):
        run = _qc(results, latency_class)
        for q in ("p50", "p99"):
            metric = f"{latency_class} publish latency {q} @ {rate:,} msg/s (open loop)"
            value = _latency(run, q) if run else _missing(results)
            row = [metric, value, NOT_MEASURED, NOT_MEASURED, NOT_MEASURED, NOT_MEASURED, "info"]
            if latency_class == "express" and q == "p99":
                row = _express_target(metric, run, reference, results)
            rows.append(row)
    return rows


def _express_target(
    metric: str, run: dict[str, Any] | None, reference: dict[str, Any] | None, results: Any
) -> list[str]:
    target = f"≤ {EXPRESS_P99_MS:g} ms"
    if not reference:
        return [metric, _missing(results), *[NOT_MEASURED] * 3, target, "n/a"]
    flush = reference["flush_ms"]
    label = "one S3 PUT + one commit + linger (p50s, this run)"
    if run is None or run.get("p99_ms") is None:
        return [metric, _missing(results), label, _ms(flush), NOT_MEASURED, target, "n/a"]
    p99 = run["p99_ms"]
    verdict = "PASS" if p99 <= EXPRESS_P99_MS and not run.get("unanswered") else "FAIL"
    ratio = ("≥ " if run.get("unanswered") else "") + _ratio(p99 / flush)
    return [metric, _latency(run, "p99"), label, _ms(flush), ratio, target, verdict]


def _cost_rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    for latency_class in ("express", "standard"):
        run = _qc(results, latency_class) or {}
        puts = run.get("puts_per_1000")
        interval = run.get("flush_interval_ms")
        value = _missing(results) if puts is None else f"{puts:.1f}"
        if interval is not None:
            value += f" (a flush every {interval:.0f} ms per API process)"
        row = [f"S3 PUTs per 1,000 messages, {latency_class}", value, *[NOT_MEASURED] * 4, "info"]
        linger = results.get("standard_linger_ms")
        if latency_class == "standard" and linger:
            row[5] = f"flushes ≥ {linger:g} ms apart per API process (the standard linger)"
            row[6] = "n/a" if interval is None else ("PASS" if interval >= linger else "FAIL")
        rows.append(row)
    memory = _qc(results, "memory")
    memory_text = (
        f"{memory['rss_bytes'] / MIB:,.0f} MiB RSS ({memory['pss_bytes'] / MIB:,.0f} MiB PSS), "
        f"{memory['processes']} processes"
        if memory
        else _missing(results)
    )
    rows.append(["API memory at the end", memory_text, *[NOT_MEASURED] * 4, "info"])
    return rows


def _tenancy_rows(results: dict[str, Any]) -> list[list[str]]:
    """API CPU per message of every phase, Pro tenants per API core, the noisy neighbour."""
    rows = []
    for phase in ("batched", "single", "express", "standard", "noisy"):
        cost = (_qc(results, phase) or {}).get("api_cpu_us_per_msg")
        target = API_CPU_TARGET_US.get(phase)
        verdict = "info" if target is None or cost is None else _pass(cost <= target)
        rows.append(
            [
                f"API CPU per message, {phase}",
                _missing(results) if cost is None else f"{cost:,.1f} µs",
                *[NOT_MEASURED] * 3,
                NOT_MEASURED if target is None else f"≤ {target:g} µs",
                verdict,
            ]
        )
    single = (_qc(results, "single") or {}).get("api_cpu_us_per_msg")
    per_core = 1e6 / (single * PRO_PUBLISH_PER_S) if single else None
    rows.append(
        [
            f"Pro tenants at their full publish rate ({PRO_PUBLISH_PER_S:,}/s) per API core",
            _missing(results) if per_core is None else f"{per_core:.2f}",
            "from the single-message API CPU",
            *[NOT_MEASURED] * 3,
            "info",
        ]
    )
    rows.append(_noisy_row(_qc(results, "noisy")))
    return rows


def _noisy_row(noisy: dict[str, Any] | None) -> list[str]:
    metric = "quiet tenant's publish p99 beside a flooding one (50/s vs batches)"
    target = f"≤ {NOISY_P99_RATIO:g}x alone"
    if not noisy or noisy.get("p99_ratio") is None:
        return [metric, NOT_MEASURED, "its p99 alone", NOT_MEASURED, NOT_MEASURED, target, "n/a"]
    beside, alone = noisy["beside"], noisy["alone"]
    flood = noisy.get("flood", {})
    return [
        metric,
        f"{beside['p99_ms']:.1f} ms (p50 {beside['p50_ms']:.1f}; flood "
        f"{flood.get('msgs_per_s') or 0:,.0f} msg/s)",
        "its p99 alone",
        f"{alone['p99_ms']:.1f} ms (p50 {alone['p50_ms']:.1f})",
        _ratio(noisy["p99_ratio"]),
        target,
        _pass(noisy["p99_ratio"] <= NOISY_P99_RATIO),
    ]


def _pass(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def reference_lines(results: dict[str, Any]) -> list[str]:
    """The reference-cost sentence under a report's table."""
    ref = results.get("reference")
    if not ref:
        return ["Reference cost: not measured."]
    return [
        f"Reference cost, measured in this run: S3 PUT of 1 KiB p50 {ref['put_p50_ms']:.2f} ms "
        f"(p99 {ref['put_p99_ms']:.2f}), PostgreSQL INSERT+COMMIT p50 {ref['commit_p50_ms']:.2f} ms "
        f"(p99 {ref['commit_p99_ms']:.2f}), express linger {ref['linger_ms']:g} ms "
        f"({ref['linger_source']}) → one flush ≈ {ref['flush_ms']:.2f} ms."
    ]


def _notes(results: dict[str, Any]) -> list[str]:
    notes = []
    if results.get("queuecore_error"):
        notes.append(f"- QueueCore phases did not run: {results['queuecore_error']}")
    for phase in ("batched", "single", "express", "standard"):
        run = _qc(results, phase)
        if run and run.get("unanswered"):
            notes.append(
                f"- QueueCore {phase}: {run['unanswered']:,} of {run['sent']:,} publishes still "
                f"unanswered {results['config']['drain_s']:g} s after the timetable ended: "
                f"{results['config']['rate_per_s']:,} msg/s was not sustained"
            )
        if run and run.get("errors"):
            samples = "; ".join(run.get("error_samples", [])[:2])
            notes.append(f"- QueueCore {phase}: {run['errors']} failed requests ({samples})")
        if run and run.get("server_p50_ms") is not None:
            notes.append(
                f"- QueueCore {phase}: server-reported latency p50 {run['server_p50_ms']:g} ms, "
                f"p99 {run['server_p99_ms']:g} ms; "
                f"{run.get('ok', 0):,} of {run.get('sent', 0):,} publishes answered 201"
            )
    for name in ("redis", "rabbitmq"):
        peer = _peer(results, name)
        if peer.get("status") == "ok":
            notes.append(f"- {name} {peer.get('version', '?')}: measured in this run")
        else:
            notes.append(f"- {name}: {peer.get('status')} {peer.get('reason', '')}".rstrip())
    notes += _ceiling(results)
    notes += _hardware_bound(results)
    notes.append(_contention(results))
    return ["Notes:", *notes]


def _ceiling(results: dict[str, Any]) -> list[str]:
    """What the durability contract allows single-message publishing, whatever it costs in CPU."""
    ref = results.get("reference")
    ceiling = _ceiling_msgs_per_s(results)
    if not ref or ceiling is None:
        return []
    clients = results["config"]["clients"]
    return [
        f"- Ceiling of single-message publish with {clients} closed-loop clients: each publish "
        f"is answered only after one S3 PUT and one commit, so at most {clients} ÷ "
        f"({ref['put_p50_ms']:.2f} + {ref['commit_p50_ms']:.2f} ms) = "
        f"{ceiling:,.0f} msg/s here, even at zero CPU cost"
    ]


def _hardware_bound(results: dict[str, Any]) -> list[str]:
    """What the machine's cores allow: every process's CPU per message, and the object store's."""
    cores = results["machine"]["logical_cores"] or 1
    notes = []
    for phase in ("batched", "single"):
        run = _qc(results, phase)
        if not run or not run.get("msgs_per_s") or "cpu_pct_by_process" not in run:
            continue
        busy_pct = sum(run["cpu_pct_by_process"].values()) + run.get("softirq_cpu_pct", 0)
        per_msg_us = busy_pct / 100 * cores / run["msgs_per_s"] * 1e6
        bound = cores / per_msg_us * 1e6
        notes.append(
            f"- Hardware bound of QueueCore {phase}: its processes (services, API, load "
            f"generator, loopback softirq) used {per_msg_us:,.1f} µs of CPU per message, so "
            f"{cores} fully busy cores would give {bound:,.0f} msg/s; the run reached "
            f"{run['msgs_per_s'] / bound:.0%} of that ({busy_pct:.0f}% of the cores busy)"
        )
    ingest = results.get("object_store_ingest")
    redis = _peer(results, "redis")
    if ingest and ingest.get("server_cpu_ms_per_mb"):
        text = (
            f"- Object store alone ({ingest['in_flight']} PUTs of "
            f"{ingest['object_bytes'] // 1024} KiB in flight, nothing else running): "
            f"{ingest['mb_per_s']:,.0f} MB/s using {ingest['server_cores_used']:g} cores, "
            f"{ingest['server_cpu_ms_per_mb']:g} ms of its CPU per MB"
        )
        per_msg = (_qc(results, "batched") or {}).get("object_bytes_per_msg")
        if redis.get("status") == "ok" and per_msg:
            stored_mb_per_s = redis["batched"]["msgs_per_s"] * per_msg / 1e6
            need = stored_mb_per_s * ingest["server_cpu_ms_per_mb"] / 1000
            text += (
                f"; at Redis Streams' batched rate ({redis['batched']['msgs_per_s']:,.0f} msg/s, "
                f"{per_msg:,.0f} segment bytes per message after zstd: {stored_mb_per_s:,.0f} "
                f"MB/s to store) it alone would need {need:.2f} of the {cores} cores"
            )
        notes.append(text)
    return notes


def _contention(results: dict[str, Any]) -> str:
    """Where the CPU went in each phase, including to processes outside this benchmark."""
    phases = []
    for phase in ("batched", "single", "express", "standard"):
        run = _qc(results, phase)
        if run and "others_cpu_pct" in run:
            phases.append(f"QueueCore {phase}: {cpu_shares(run)}")
    for name in ("redis", "rabbitmq"):
        peer = _peer(results, name)
        if peer.get("status") == "ok":
            phases.append(f"{name}: {cpu_shares(peer['batched'])}")
    return cpu_note(results, phases)


def cpu_note(results: dict[str, Any], phases: list[str]) -> str:
    """The CPU-by-process note, flagged when other processes disturbed the run."""
    overall = results.get("others_cpu_pct")
    warning = " (numbers disturbed: rerun on a quiet machine)" if (overall or 0) > 5 else ""
    steal = results.get("steal_cpu_pct")
    stolen = f"; steal {steal:g}%" if steal is not None else ""
    lines = "".join(f"\n  - {phase}" for phase in phases)
    return (
        f"- CPU by process, as a share of all cores; `others` = busy time outside this "
        f"benchmark's processes: other processes and the kernel's work for none, such as steal "
        f"(the hypervisor running another guest instead of this one) and softirq (mostly this "
        f"benchmark's own loopback traffic), shown apart "
        f"(whole run: others {overall if overall is not None else '?'}%{stolen}{warning}):{lines}"
    )


def cpu_shares(run: dict[str, Any]) -> str:
    """One phase's CPU split, ``name pct%`` per process group."""
    shares = {**run.get("cpu_pct_by_process", {}), "others": run.get("others_cpu_pct", 0)}
    text = ", ".join(f"{name} {pct:g}%" for name, pct in shares.items())
    if "steal_cpu_pct" in run:  # the parts of `others` that are no process's
        text += f" (steal {run['steal_cpu_pct']:g}%, softirq {run['softirq_cpu_pct']:g}%)"
    waited = run.get("cpu_wait_pct_by_process", {}).get("api")
    if waited is not None:
        text += f"; the API waited for a CPU {waited:g}% of the time"
    return text


def _machine_lines(results: dict[str, Any]) -> list[str]:
    m = results["machine"]
    cfg = results["config"]
    return [
        f"Machine: {m['cpu_model']}, {m['logical_cores']} logical cores "
        f"({m['physical_cores']} physical), {m['ram_gib']} GiB RAM, load average at start "
        f"{'/'.join(str(x) for x in m['load_average_at_start'])}, Linux {m['kernel']}, "
        f"Python {m['python']}. Everything (services, API, peers, load generator) on this one "
        f"machine over loopback.",
        f"Run: {cfg['duration_s']:g} s per phase after {cfg['warmup_s']:g} s warm-up, "
        f"{cfg['workers']} API worker processes, PostgreSQL {results.get('postgres_version', '?')}, "
        f"SeaweedFS {results.get('seaweedfs_version', '?')}.",
    ]


def _rate(run: dict[str, Any]) -> str:
    return f"{run['msgs_per_s']:,.0f} msg/s ({run['mb_per_s']:,.1f} MB/s)"


def _latency(run: dict[str, Any], q: str) -> str:
    """A percentile; a lower bound when sends were still unanswered after the drain."""
    value = _ms(run.get(f"{q}_ms"))
    return f"≥ {value} (saturated)" if run.get("unanswered") else value


def _ratio(value: float | None) -> str:
    return NOT_MEASURED if value is None else f"{value:.2f}x"


def _ms(value: float | None) -> str:
    return NOT_MEASURED if value is None else f"{value:.1f} ms"


def _missing(results: dict[str, Any]) -> str:
    return "not measured" if results.get("queuecore_error") else NOT_MEASURED
