"""Producing 1 KiB records over the Kafka protocol (librdkafka) against REST batches, in one run.

``python -m benchmarks.kafka [--duration S] [--rounds N] [--json out.json]`` starts a private
stack (PostgreSQL, SeaweedFS, Redis, one ``queuecore serve`` worker with its Kafka listener),
then alternates the two phases ``--rounds`` times on the same topics' shape:

- **REST batches**: 8 keep-alive HTTP/1.1 clients back to back, ``POST …/messages/batch`` of 100
  messages whose ``data`` is a 1 KiB string (the publish benchmark's batched phase);
- **Kafka**: one librdkafka producer (confluent-kafka, ``acks=all``, ``linger.ms=5``, no
  compression) producing the same 1 KiB strings as JSON values (so both store the same bytes),
  as fast as its queue allows.

For each it reports records/s (records committed during the phase, from PostgreSQL) and the API
process's CPU per record (its whole process tree, from ``/proc``). A script, not a test: nothing
in ``tests/`` asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from benchmarks import rawhttp
from benchmarks._stack import Stack
from benchmarks.cpu import CpuWatch, shares
from benchmarks.load import closed_loop, payloads
from infra.embedded import HOST, free_port_block

BATCH = 100
CLIENTS = 8
WARMUP_S = 2.0


def _step(message: str) -> None:
    print(f"[kafka-bench] {message}", file=sys.stderr, flush=True)


async def rest_phase(
    stack: Stack, topic: str, texts: list[str], duration_s: float
) -> dict[str, Any]:
    """8 clients posting batches of 100 for ``duration_s`` after a warm-up."""
    headers = {**stack.auth_headers(), "Content-Type": "application/json"}
    path = f"/v1/topics/{topic}/messages/batch"
    bodies = [
        json.dumps({"messages": [{"data": t} for t in texts[i : i + BATCH]]}).encode()
        for i in range(0, len(texts), BATCH)
    ]
    requests = [rawhttp.build_request(HOST, stack.http_port, path, headers, b) for b in bodies]
    clients = [rawhttp.Connection(HOST, stack.http_port) for _ in range(CLIENTS)]
    turns = [0] * CLIENTS

    async def send(index: int) -> int:
        turns[index] += 1
        status, _ = await clients[index].send(requests[(turns[index] + index) % len(requests)])
        if status != 201:
            raise RuntimeError(f"batch publish answered {status}")
        return BATCH

    _, before = stack.settled(topic)
    with CpuWatch(stack.process_groups()) as watch:
        result = await closed_loop(send, CLIENTS, duration_s, WARMUP_S)
        _, after = stack.settled(topic)
    for client in clients:
        client.close()
    return _summary(watch, after - before, duration_s + WARMUP_S, result.errors)


def kafka_phase(
    stack: Stack, bootstrap: str, topic: str, texts: list[str], duration_s: float
) -> dict[str, Any]:
    """One librdkafka producer as fast as its queue allows, for warm-up + ``duration_s``."""
    values = [json.dumps(t).encode() for t in texts]
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "queuecore",
            "sasl.password": stack.api_key,
            "acks": "all",
            "linger.ms": 5,
            "queue.buffering.max.messages": 200_000,
        }
    )
    failed = [0]

    def report(err: object, _msg: object) -> None:
        if err is not None:
            failed[0] += 1

    producer.list_topics(timeout=10)  # connected before the clock starts
    _, before = stack.settled(topic)
    started = time.monotonic()
    end = started + WARMUP_S + duration_s
    with CpuWatch(stack.process_groups()) as watch:
        sent = 0
        while time.monotonic() < end:
            try:
                producer.produce(topic, values[sent % len(values)], on_delivery=report)
                sent += 1
            except BufferError:
                producer.poll(0.005)
            if sent % 1000 == 0:
                producer.poll(0)
        producer.flush(60)
        elapsed = time.monotonic() - started
        _, after = stack.settled(topic)
    return _summary(watch, after - before, elapsed, failed[0])


def _summary(watch: CpuWatch, stored: int, elapsed_s: float, errors: int) -> dict[str, Any]:
    api_cpu_s = watch.groups_cpu_s.get("api", 0.0)
    return {
        "records": stored,
        "records_per_s": round(stored / elapsed_s, 1),
        "api_cpu_us_per_record": round(api_cpu_s * 1e6 / max(stored, 1), 1),
        "errors": errors,
        **shares(watch),
    }


def run(root: Path, duration_s: float, rounds: int) -> dict[str, Any]:
    """Start the stack, run the phases ``rounds`` times each, stop the stack."""
    kafka_port = free_port_block()
    os.environ["QUEUECORE_KAFKA_PORT"] = str(kafka_port)
    stack = Stack(root, workers=1)
    results: dict[str, Any] = {"rest_batches": [], "kafka": []}
    try:
        _step("starting PostgreSQL, SeaweedFS, Redis and queuecore serve")
        stack.start_services()
        stack.start_api()
        stack.create_tenant()
        stack.create_topic("bench.rest", "express")
        stack.create_topic("bench.kafka", "express")
        texts = payloads()
        for number in range(1, rounds + 1):
            _step(f"round {number}: REST batches")
            rest = asyncio.run(rest_phase(stack, "bench.rest", texts, duration_s))
            results["rest_batches"].append(rest)
            _step(
                f"  {rest['records_per_s']} records/s, {rest['api_cpu_us_per_record']} µs API CPU/record"
            )
            _step(f"round {number}: Kafka (librdkafka)")
            kafka = kafka_phase(stack, f"{HOST}:{kafka_port}", "bench.kafka", texts, duration_s)
            results["kafka"].append(kafka)
            _step(
                f"  {kafka['records_per_s']} records/s, {kafka['api_cpu_us_per_record']} µs API CPU/record"
            )
    finally:
        stack.stop()
    return results


def main(argv: list[str] | None = None) -> int:
    """Command line entry: run, print a table (and write JSON when asked)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per phase")
    parser.add_argument("--rounds", type=int, default=2, help="REST/Kafka pairs, alternating")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="qc-kafka-bench-") as root:
        results = run(Path(root), args.duration, args.rounds)
    print(f"{'phase':<14}{'records/s':>12}{'API CPU µs/record':>20}{'others CPU %':>14}")
    for name in ("rest_batches", "kafka"):
        for item in results[name]:
            print(
                f"{name:<14}{item['records_per_s']:>12}{item['api_cpu_us_per_record']:>20}"
                f"{item['others_cpu_pct']:>14}"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
