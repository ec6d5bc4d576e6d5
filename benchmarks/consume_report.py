"""The markdown report of a consumer-benchmark run, drawn only from its JSON results."""

from __future__ import annotations

from typing import Any

from benchmarks.report import NOT_MEASURED, cpu_note, cpu_shares, reference_lines

THROUGHPUT_FACTOR = 3.0  # consume+ack ≥ 3x RabbitMQ quorum queues
LATENCY_FACTOR = 3.0  # e2e p99 ≤ 3x (one S3 PUT + one commit + linger)
PEER_LABELS = {
    "rabbitmq": "RabbitMQ quorum queue, manual acks, prefetch {prefetch}, multiple-ack every "
    "{ack_every}",
    "redis": "Redis Streams (appendfsync always), XREADGROUP COUNT 1000 + XACK pipelined",
}


def render(results: dict[str, Any]) -> str:
    """The whole report: table, reference cost, notes, machine."""
    header = "| metric | QueueCore | compared with | its value | QueueCore ÷ it | target | result |"
    rows = [header, "|" + " --- |" * 7]
    for row in [*_throughput_rows(results), *_latency_rows(results)]:
        rows.append("| " + " | ".join(row) + " |")
    lines = ["## QueueCore consumer benchmark", "", *rows, ""]
    lines += [*reference_lines(results), "", *_notes(results), "", *_machine(results)]
    return "\n".join(lines) + "\n"


def _qc(results: dict[str, Any], phase: str) -> dict[str, Any] | None:
    found = results.get("queuecore", {}).get(phase)
    return found if isinstance(found, dict) else None


def _peer(results: dict[str, Any], name: str) -> dict[str, Any]:
    return dict(results.get("peers", {}).get(name, {"status": "not selected"}))


def _throughput_rows(results: dict[str, Any]) -> list[list[str]]:
    cfg = results["config"]
    metric = (
        f"consume+ack, {cfg['messages']:,} pre-published 1 KiB messages, {cfg['members']} "
        f"members, pull ≤ {cfg['pull_max']}, batched acks"
    )
    ours = _qc(results, "drain")
    rows = []
    for name, judged in (("rabbitmq", True), ("redis", False)):
        peer = _peer(results, name)
        label = PEER_LABELS[name].format(
            prefetch=cfg["rabbit_prefetch"], ack_every=cfg["rabbit_ack_every"]
        )
        target = f"≥ {THROUGHPUT_FACTOR:g}x RabbitMQ" if judged else NOT_MEASURED
        ours_text = _rate(ours) if ours else _missing(results)
        if peer.get("status") != "ok":
            why = str(peer.get("status")) + (f" ({peer['reason']})" if peer.get("reason") else "")
            verdict = f"n/a: peer {peer.get('status')}" if judged else "info"
            rows.append([metric, ours_text, label, why, NOT_MEASURED, target, verdict])
            continue
        theirs = peer["drain"]
        ratio = ours["msgs_per_s"] / theirs["msgs_per_s"] if ours and theirs["msgs_per_s"] else None
        verdict = "info"
        if judged:
            valid = ours is not None and str(ours.get("verified", "")).startswith("ok")
            verdict = (
                "n/a"
                if ratio is None
                else ("PASS" if ratio >= THROUGHPUT_FACTOR and valid else "FAIL")
            )
        rows.append([metric, ours_text, label, _rate(theirs), _ratio(ratio), target, verdict])
    return rows


def _latency_rows(results: dict[str, Any]) -> list[list[str]]:
    cfg = results["config"]
    run = _qc(results, "e2e")
    metric = "end-to-end latency {q}, publish → SSE delivery @ {rate:,} msg/s (open loop)"
    p50 = metric.format(q="p50", rate=cfg["rate_per_s"])
    p99 = metric.format(q="p99", rate=cfg["rate_per_s"])
    rows = [[p50, _latency(run, "p50", results), *[NOT_MEASURED] * 4, "info"]]
    ref = results.get("reference")
    if not ref:
        rows.append([p99, _latency(run, "p99", results), *[NOT_MEASURED] * 3, "", "n/a"])
        return rows
    flush = ref["flush_ms"]
    label = "one S3 PUT + one commit + linger (p50s, this run)"
    target = f"≤ {LATENCY_FACTOR:g}x that = {LATENCY_FACTOR * flush:.1f} ms"
    if run is None or run.get("p99_ms") is None:
        rows.append([p99, _missing(results), label, _ms(flush), NOT_MEASURED, target, "n/a"])
        return rows
    ok = run["p99_ms"] <= LATENCY_FACTOR * flush and not run.get("unanswered")
    ratio = ("≥ " if run.get("unanswered") else "") + _ratio(run["p99_ms"] / flush)
    verdict = "PASS" if ok else "FAIL"
    rows.append([p99, _latency(run, "p99", results), label, _ms(flush), ratio, target, verdict])
    publish = run.get("publish") or {}
    rows.append(
        [
            f"publish latency p50 / p99 in the same phase (response to the publisher, "
            f"{cfg['rate_per_s']:,} msg/s)",
            f"{_ms(publish.get('p50_ms'))} / {_ms(publish.get('p99_ms'))}",
            *[NOT_MEASURED] * 4,
            "info",
        ]
    )
    after = run.get("after_answer") or {}
    rows.append(
        [
            "delivery after the publish was answered p50 / p99 (SSE receipt - 201 received; "
            "the consume side's share)",
            f"{_ms(after.get('p50_ms'))} / {_ms(after.get('p99_ms'))}",
            *[NOT_MEASURED] * 4,
            "info",
        ]
    )
    return rows


def _notes(results: dict[str, Any]) -> list[str]:
    notes = []
    if results.get("queuecore_error"):
        notes.append(f"- QueueCore phases did not run: {results['queuecore_error']}")
    e2e = _qc(results, "e2e")
    if e2e:
        notes.append(
            f"- e2e: {e2e['sent']:,} messages scheduled after warm-up, "
            f"{e2e['published_ok']:,} publishes answered 201 (warm-up included), "
            f"{e2e['delivered']:,} delivered on {e2e['members']} SSE streams, "
            f"{e2e['acked']:,} acked in {e2e['ack_requests']:,} ack requests; "
            f"{e2e['duplicates']} duplicates, {e2e['redelivered']} redeliveries, "
            f"{e2e['unanswered']} never delivered within the drain (counted with their wait so "
            f"far); p99.9 {_ms(e2e.get('p999_ms'))}, max {_ms(e2e.get('max_ms'))}"
        )
        if e2e.get("publish_errors") or e2e.get("ack_rejections"):
            samples = "; ".join(
                [*e2e["publish"].get("error_samples", [])[:2], *e2e["ack_rejections"][:2]]
            )
            notes.append(f"- e2e: {e2e['publish_errors']} failed publishes; {samples}")
    for label, run in (("QueueCore", _qc(results, "drain")), *_peer_drains(results)):
        if run:
            notes.append(
                f"- {label} consume+ack: {run['acked']:,} acked in {run['elapsed_s']:.2f} s over "
                f"{run['requests']:,} requests/frames, {run['redelivered']} redelivered; "
                f"pre-publish took {run['prepublish_s']:.1f} s "
                f"({run['prepublish_msgs_per_s'] or 0:,.0f} msg/s); verification: {run['verified']}"
            )
    drain = _qc(results, "drain")
    if drain and drain.get("ack_wait_s") is not None:
        notes.append(
            f"- QueueCore consume+ack, client side: {drain['pull_requests']:,} pulls waited "
            f"{drain['pull_wait_s']:.1f} s in all, {drain['ack_requests']:,} ack requests waited "
            f"{drain['ack_wait_s']:.1f} s in all "
            f"({drain['ack_wait_s'] * 1000 / max(drain['acked'], 1):.2f} ms per acked id), "
            f"summed over {drain['consumers']} members"
        )
    for name in ("redis", "rabbitmq"):
        peer = _peer(results, name)
        if peer.get("status") == "ok":
            notes.append(f"- {name} {peer.get('version', '?')}: measured in this run")
        else:
            notes.append(f"- {name}: {peer.get('status')} {peer.get('reason', '')}".rstrip())
    notes.append(_cpu(results))
    return ["Notes:", *notes]


def _peer_drains(results: dict[str, Any]) -> list[tuple[str, dict[str, Any] | None]]:
    out = []
    for name in ("rabbitmq", "redis"):
        peer = _peer(results, name)
        out.append((name, peer.get("drain") if peer.get("status") == "ok" else None))
    return out


def _cpu(results: dict[str, Any]) -> str:
    phases = []
    for phase, label in (("e2e", "e2e latency"), ("drain", "consume+ack")):
        run = _qc(results, phase)
        if run and "cpu_pct_by_process" in run:
            phases.append(f"QueueCore {label}: {cpu_shares(run)}")
    for name, run in _peer_drains(results):
        if run and "cpu_pct_by_process" in run:
            phases.append(f"{name} consume+ack: {cpu_shares(run)}")
    return cpu_note(results, phases)


def _machine(results: dict[str, Any]) -> list[str]:
    m = results["machine"]
    cfg = results["config"]
    return [
        f"Machine: {m['cpu_model']}, {m['logical_cores']} logical cores "
        f"({m['physical_cores']} physical), {m['ram_gib']} GiB RAM, load average at start "
        f"{'/'.join(str(x) for x in m['load_average_at_start'])}, Linux {m['kernel']}, "
        f"Python {m['python']}. Everything (services, API, peers, load generator) on this one "
        f"machine over loopback.",
        f"Run: e2e {cfg['duration_s']:g} s after {cfg['warmup_s']:g} s warm-up, "
        f"{cfg['partitions']} partitions per topic, {cfg['members']} members, maxInFlight "
        f"{cfg['max_in_flight']:,} per member, {cfg['workers']} API worker processes, "
        f"PostgreSQL {results.get('postgres_version', '?')}, SeaweedFS "
        f"{results.get('seaweedfs_version', '?')}; wall clock {results.get('wall_clock_s', '?')} s.",
    ]


def _rate(run: dict[str, Any]) -> str:
    return f"{run['msgs_per_s']:,.0f} msg/s ({run['mb_per_s']:,.1f} MB/s)"


def _latency(run: dict[str, Any] | None, q: str, results: dict[str, Any]) -> str:
    if run is None:
        return _missing(results)
    value = _ms(run.get(f"{q}_ms"))
    return f"≥ {value} (not all delivered)" if run.get("unanswered") else value


def _ratio(value: float | None) -> str:
    return NOT_MEASURED if value is None else f"{value:.2f}x"


def _ms(value: float | None) -> str:
    return NOT_MEASURED if value is None else f"{value:.1f} ms"


def _missing(results: dict[str, Any]) -> str:
    return "not measured" if results.get("queuecore_error") else NOT_MEASURED
