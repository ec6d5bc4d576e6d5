"""SDK throughput from one process: batch publish and consume+ack, raw HTTP beside each SDK.

``python -m benchmarks.sdks`` starts a private stack (see ``benchmarks/_stack.py``), then for
each client publishes ``--messages`` messages in batches of ``--batch`` one request after
another, and consumes and acks as many from a topic filled beforehand (not timed). Clients:

- ``raw-httpx``: ``httpx.AsyncClient``, the floor of what a Python program gets: batch publish;
  join, pull ``--batch`` messages, ack them in one request, leave;
- ``python-async``: ``AsyncQueueCore``: ``publish_batch``; a consumer on the event stream whose
  handler acks each message (the README's way);
- ``python-async-batched-ack``: the same consumer iterated, acking ``--batch`` messages per
  request with ``consumer.ack(...)``;
- ``python-async-pull-concurrent``: a pulling consumer (``--batch`` per pull) running
  ``--batch`` handlers at once, each acking its own message (the acks share requests);
- ``python-sync``: ``QueueCore`` (the synchronous wrapper), iterated, acking each message;
- ``typescript`` and ``go``, when their bench programs are present (``node
  sdk/typescript/dist/bench.js``, ``sdk/go/cmd/qcbench``), run as subprocesses with
  ``--mode publish-batch|consume-ack --topic T --messages N --batch B`` and
  ``QUEUECORE_API_KEY``/``QUEUECORE_URL`` set; each prints ``{"messages": N, "seconds": S}``.

A script, not a test: nothing asserts a timing. The figures are messages per second; on a
shared machine they move by tens of per cent between runs, so compare clients of one run.

Then, on a Developer-tier key, each SDK's default settings keeping up (``benchmarks.keeping_up``):
concurrent publishes, acks one by one, a slow sequential handler's dead letters.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from queuecore import AsyncMessage, AsyncQueueCore, QueueCore

from benchmarks import keeping_up
from benchmarks._stack import REPO_ROOT, Stack

Runner = Callable[[Stack, str, int, int], Awaitable[float]]
DEADLINE_S = 300.0  # a phase that takes longer is reported as failed


def _items(count: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"n": start + i, "pad": "x" * 100} for i in range(count)]


# --- raw HTTP ----------------------------------------------------------------------------------


def _raw(stack: Stack) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=stack.base_url, headers=stack.auth_headers(), timeout=60)


async def raw_publish(stack: Stack, topic: str, count: int, batch: int) -> float:
    """Batches of ``batch`` messages, one request after another; seconds taken."""
    async with _raw(stack) as http:
        started = time.perf_counter()
        for first in range(0, count, batch):
            body = {"messages": [{"data": d} for d in _items(min(batch, count - first), first)]}
            response = await http.post(f"/v1/topics/{topic}/messages/batch", json=body)
            response.raise_for_status()
        return time.perf_counter() - started


async def raw_consume(stack: Stack, topic: str, count: int, batch: int) -> float:
    """Join, pull ``batch`` at a time and ack each pull in one request, leave; seconds taken."""
    group = f"/v1/topics/{topic}/groups/bench"
    async with _raw(stack) as http:
        started = time.perf_counter()
        configured = await http.put(group, json={"startFrom": "earliest"})
        configured.raise_for_status()
        member = (await http.post(f"{group}/members", json={"clientId": "raw"})).json()["memberId"]
        done, deadline = 0, started + DEADLINE_S
        while done < count and time.perf_counter() < deadline:
            pulled = await http.post(
                f"{group}/members/{member}/pull", json={"maxMessages": batch, "waitMs": 2000}
            )
            ack_ids = [m["ackId"] for m in pulled.json()["messages"]]
            if ack_ids:
                acked = await http.post(f"{group}/ack", json={"ackIds": ack_ids})
                done += len(acked.json()["acked"])
        elapsed = time.perf_counter() - started
        await http.delete(f"{group}/members/{member}")
        if done < count:
            raise TimeoutError(f"{done} of {count} acked in {DEADLINE_S:.0f} s")
        return elapsed


# --- the Python SDK ----------------------------------------------------------------------------


async def sdk_publish(stack: Stack, topic: str, count: int, batch: int) -> float:
    """``publish_batch`` of ``batch`` messages, one call after another; seconds taken."""
    async with AsyncQueueCore(stack.api_key, stack.base_url) as pq:
        started = time.perf_counter()
        for first in range(0, count, batch):
            await pq.publish_batch(topic, _items(min(batch, count - first), first))
        return time.perf_counter() - started


async def sdk_consume(stack: Stack, topic: str, count: int, batch: int) -> float:
    """A streaming consumer whose handler acks each message; seconds until all are acked."""
    return await _sdk_handler_consume(stack, topic, count, batch, stream=True, concurrency=1)


async def sdk_consume_concurrent(stack: Stack, topic: str, count: int, batch: int) -> float:
    """A pulling consumer running ``batch`` handlers at once, each acking its message."""
    return await _sdk_handler_consume(stack, topic, count, batch, stream=False, concurrency=batch)


async def _sdk_handler_consume(
    stack: Stack, topic: str, count: int, batch: int, *, stream: bool, concurrency: int
) -> float:
    async with AsyncQueueCore(stack.api_key, stack.base_url) as pq:
        done = asyncio.Event()
        acked = 0

        async def handle(message: AsyncMessage) -> None:
            nonlocal acked
            await message.ack()
            acked += 1
            if acked >= count:
                done.set()

        started = time.perf_counter()
        consumer = pq.consume(
            topic,
            "bench",
            start_from="earliest",
            max_in_flight=10 * batch,
            stream=stream,
            batch_size=batch,
            wait=1.0,
        )
        consumer.on_message(handle)
        await consumer.start(concurrency)
        await asyncio.wait_for(done.wait(), DEADLINE_S)
        elapsed = time.perf_counter() - started
        await consumer.stop()
        return elapsed


async def sdk_consume_batched(stack: Stack, topic: str, count: int, batch: int) -> float:
    """The streaming consumer iterated, acking ``batch`` messages per request."""
    async with AsyncQueueCore(stack.api_key, stack.base_url) as pq:
        started = time.perf_counter()
        consumer = pq.consume(topic, "bench", start_from="earliest", max_in_flight=10 * batch)
        held: list[AsyncMessage] = []
        acked = 0
        async with consumer:
            async for message in consumer:
                held.append(message)
                if len(held) >= batch or acked + len(held) >= count:
                    refused = await consumer.ack(held)
                    acked += len(held) - len(refused)
                    held = []
                if acked >= count:
                    break
            elapsed = time.perf_counter() - started
        return elapsed


async def sync_publish(stack: Stack, topic: str, count: int, batch: int) -> float:
    """``QueueCore.publish_batch`` (the synchronous wrapper), in a thread."""

    def publish() -> float:
        with QueueCore(stack.api_key, stack.base_url) as pq:
            started = time.perf_counter()
            for first in range(0, count, batch):
                pq.publish_batch(topic, _items(min(batch, count - first), first))
            return time.perf_counter() - started

    return await asyncio.to_thread(publish)


async def sync_consume(stack: Stack, topic: str, count: int, batch: int) -> float:
    """``QueueCore`` consumer iterated, acking each message, in a thread."""

    def consume() -> float:
        with QueueCore(stack.api_key, stack.base_url) as pq:
            started = time.perf_counter()
            consumer = pq.consume(topic, "bench", start_from="earliest", max_in_flight=10 * batch)
            acked = 0
            with consumer:
                for message in consumer:
                    message.ack()
                    acked += 1
                    if acked >= count:
                        break
                return time.perf_counter() - started

    return await asyncio.to_thread(consume)


# --- other SDKs' bench programs ----------------------------------------------------------------


def external_commands(ts_dir: Path, go_dir: Path, work: Path) -> dict[str, list[str]]:
    """The TypeScript and Go bench commands that can run here (a missing one is left out)."""
    found: dict[str, list[str]] = {}
    bench_js = ts_dir / "dist" / "bench.js"
    if bench_js.exists() and shutil.which("node"):
        found["typescript"] = ["node", str(bench_js)]
    else:
        print(f"no TypeScript bench: {bench_js} or node missing", file=sys.stderr)
    if (go_dir / "cmd" / "qcbench").is_dir() and shutil.which("go"):
        binary = work / "qcbench"
        built = subprocess.run(
            ["go", "build", "-o", str(binary), "./cmd/qcbench"],
            cwd=go_dir,
            capture_output=True,
            text=True,
            check=False,
        )
        if built.returncode == 0:
            found["go"] = [str(binary)]
        else:
            print(f"go bench did not build: {built.stderr[-500:]}", file=sys.stderr)
    else:
        print(f"no Go bench: {go_dir}/cmd/qcbench or go missing", file=sys.stderr)
    return found


def external_runner(command: list[str], mode: str) -> Runner:
    """A runner that executes ``command`` and reads its JSON line."""

    async def run(stack: Stack, topic: str, count: int, batch: int) -> float:
        args = ["--mode", mode, "--topic", topic, "--messages", str(count), "--batch", str(batch)]
        env = {**os.environ, "QUEUECORE_API_KEY": stack.api_key, "QUEUECORE_URL": stack.base_url}
        done = await asyncio.to_thread(
            subprocess.run, [*command, *args], env=env, capture_output=True, text=True, timeout=600
        )
        if done.returncode != 0:
            raise RuntimeError(f"{command[0]} exited {done.returncode}: {done.stderr[-500:]}")
        line = [ln for ln in done.stdout.splitlines() if ln.strip().startswith("{")][-1]
        return float(json.loads(line)["seconds"])

    return run


# --- the run -----------------------------------------------------------------------------------


def clients(ts_dir: Path, go_dir: Path, work: Path) -> dict[str, tuple[Runner, Runner]]:
    """Every client's (publish-batch, consume-ack) runners."""
    found: dict[str, tuple[Runner, Runner]] = {
        "raw-httpx": (raw_publish, raw_consume),
        "python-async": (sdk_publish, sdk_consume),
        "python-async-batched-ack": (sdk_publish, sdk_consume_batched),
        "python-async-pull-concurrent": (sdk_publish, sdk_consume_concurrent),
        "python-sync": (sync_publish, sync_consume),
    }
    for name, command in external_commands(ts_dir, go_dir, work).items():
        found[name] = (
            external_runner(command, "publish-batch"),
            external_runner(command, "consume-ack"),
        )
    return found


async def measure(
    stack: Stack, name: str, runners: tuple[Runner, Runner], args: Any
) -> dict[str, Any]:
    """One client's two figures (messages per second), or the error that stopped it."""
    slug = name.replace("-", "")
    publish_topic, consume_topic = f"sdkbench.{slug}.pub", f"sdkbench.{slug}.con"
    row: dict[str, Any] = {"client": name}
    print(f"measuring {name} …", file=sys.stderr)
    try:
        stack.create_topic(publish_topic, "express", args.partitions)
        stack.create_topic(consume_topic, "express", args.partitions)
        seconds = await runners[0](stack, publish_topic, args.messages, args.batch)
        row["publish_msg_s"] = round(args.messages / seconds)
        await raw_publish(stack, consume_topic, args.messages, args.batch)  # not timed
        consume = runners[1](stack, consume_topic, args.messages, args.batch)
        seconds = await asyncio.wait_for(consume, DEADLINE_S + 30)
        row["consume_ack_msg_s"] = round(args.messages / seconds)
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"[:300]
    return row


def report(rows: list[dict[str, Any]], args: Any) -> str:
    """A Markdown table of the run."""
    lines = [
        f"{args.messages} messages, batches of {args.batch}, {args.partitions} partitions,"
        f" {args.workers} API worker(s); messages per second from one process",
        "",
        "| client | batch publish | consume + ack |",
        "| --- | ---: | ---: |",
    ]
    for row in rows:
        publish = row.get("publish_msg_s", "—")
        consume = row.get("consume_ack_msg_s", row.get("error", "—"))
        lines.append(f"| {row['client']} | {publish} | {consume} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--only", default="", help="comma-separated client names")
    parser.add_argument("--ts-dir", type=Path, default=REPO_ROOT / "sdk" / "typescript")
    parser.add_argument("--go-dir", type=Path, default=REPO_ROOT / "sdk" / "go")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--keep-publishes", type=int, default=2000)
    parser.add_argument("--keep-acks", type=int, default=2000)
    parser.add_argument("--slow-messages", type=int, default=150)
    parser.add_argument("--slow-ms", type=int, default=40)
    parser.add_argument(
        "--keeping-up-only", action="store_true", help="only the Developer-tier keeping-up table"
    )
    return parser.parse_args(argv)


async def run_all(stack: Stack, chosen: dict[str, tuple[Runner, Runner]], args: Any) -> list[Any]:
    """Every chosen client, one after another."""
    rows = []
    for name, runners in chosen.items():
        rows.append(await measure(stack, name, runners, args))
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its table."""
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="qc-sdkbench-") as tmp:
        root = Path(tmp)
        stack = Stack(root / "stack", args.workers)
        try:
            stack.start_services()
            stack.start_api()
            stack.create_tenant()
            commands = external_commands(args.ts_dir, args.go_dir, root)
            rows: list[Any] = []
            if not args.keeping_up_only:
                chosen = clients(args.ts_dir, args.go_dir, root)
                if args.only:
                    chosen = {k: v for k, v in chosen.items() if k in args.only.split(",")}
                rows = asyncio.run(run_all(stack, chosen, args))
            keeping = keeping_up.runners(commands)
            if args.only:
                keeping = {k: v for k, v in keeping.items() if k in args.only.split(",")}
            kept = asyncio.run(
                keeping_up.run_all(stack.base_url, stack.developer_key(), keeping, args)
            )
        finally:
            stack.stop()
    if rows:
        print(report(rows, args))
    print(keeping_up.report(kept, args))
    if args.json is not None:
        args.json.write_text(json.dumps({"throughput": rows, "keepingUp": kept}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
