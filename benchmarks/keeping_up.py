"""Keeping up on the Developer tier, each SDK with its default settings (``benchmarks.sdks``).

Three programs written the way each README shows, on a Developer-tier key (100 publish and 50
consume requests a second):

- **publish**: ``--keep-publishes`` (2,000) ``publish`` calls made at once; the time until every
  one is answered, against the ``N / 100`` seconds the tier allows for one request per message;
- **ack**: a consumer that acks each of ``--keep-acks`` (2,000) messages as it comes (Python: an
  iterator and ``msg.ack()``; TypeScript and Go: a handler); acks refused (0 is the target) and
  the group's lag once it stopped (0);
- **slow**: a sequential handler of ``--slow-ms`` (40 ms) per message over ``--slow-messages``
  (150), the group's ack timeout 2 s and ``maxRetries`` 0 (any lease that ran out would
  dead-letter its message); dead letters and duplicates (0 and 0).

The TypeScript and Go programs run as ``--mode keep-publish|keep-ack|keep-slow`` and print one
JSON line; their topics are filled beforehand here.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from queuecore import AsyncMessage, AsyncQueueCore, QueueCore

KeepRunner = Callable[[str, str, str, dict[str, Any]], Awaitable[dict[str, Any]]]
SLOW_ACK_TIMEOUT = "2s"


# --- Python ------------------------------------------------------------------------------------


async def py_publish(url: str, key: str, topic: str, o: dict[str, Any]) -> dict[str, Any]:
    """``asyncio.gather`` of N ``await pq.publish(...)``."""
    requests = 0

    async def count(request: httpx.Request) -> None:
        nonlocal requests
        requests += request.url.path.endswith(("/messages", "/messages/batch"))

    async with AsyncQueueCore(key, url) as pq:
        pq._transport._http.event_hooks["request"].append(count)  # counts the SDK's requests
        started = time.perf_counter()
        await asyncio.gather(*(pq.publish(topic, {"n": n}) for n in range(o["count"])))
        seconds = time.perf_counter() - started
    return {"seconds": seconds, "requests": requests}


async def py_async_ack(url: str, key: str, topic: str, o: dict[str, Any]) -> dict[str, Any]:
    """``async for msg in consumer: await msg.ack()`` until N distinct messages."""
    async with AsyncQueueCore(key, url) as pq:
        errors: list[Exception] = []
        seen: collections.Counter[str] = collections.Counter()
        started = time.perf_counter()
        async with pq.consume(topic, "keep", start_from="earliest") as consumer:
            consumer.on_error(errors.append)
            async for message in consumer:
                seen[message.message_id] += 1
                await message.ack()
                if len(seen) >= o["count"]:
                    break
        return _acked(seen, errors, time.perf_counter() - started)


async def py_sync_ack(url: str, key: str, topic: str, o: dict[str, Any]) -> dict[str, Any]:
    """``for msg in consumer: msg.ack()`` in a thread, until N distinct messages."""

    def consume() -> dict[str, Any]:
        with QueueCore(key, url) as pq:
            errors: list[Exception] = []
            seen: collections.Counter[str] = collections.Counter()
            started = time.perf_counter()
            with pq.consume(topic, "keep", start_from="earliest") as consumer:
                consumer.on_error(errors.append)
                for message in consumer:
                    seen[message.message_id] += 1
                    message.ack()
                    if len(seen) >= o["count"]:
                        break
            return _acked(seen, errors, time.perf_counter() - started)

    return await asyncio.to_thread(consume)


def py_sync_publish(url: str, key: str, topic: str, o: dict[str, Any]) -> Awaitable[dict[str, Any]]:
    """N ``pq.publish(...)`` from 50 threads of the synchronous client."""
    from concurrent.futures import ThreadPoolExecutor

    def publish() -> dict[str, Any]:
        with QueueCore(key, url) as pq, ThreadPoolExecutor(50) as pool:
            started = time.perf_counter()
            list(pool.map(lambda n: pq.publish(topic, {"n": n}), range(o["count"])))
            return {"seconds": time.perf_counter() - started}

    return asyncio.to_thread(publish)


async def py_slow(url: str, key: str, topic: str, o: dict[str, Any]) -> dict[str, Any]:
    """A handler sleeping ``ms`` then acking, one at a time, until N distinct messages."""
    async with AsyncQueueCore(key, url) as pq:
        seen: collections.Counter[str] = collections.Counter()
        done = asyncio.Event()
        consumer = pq.consume(topic, "keep", start_from="earliest")

        @consumer.on_message
        async def handle(message: AsyncMessage) -> None:
            seen[message.message_id] += 1
            await asyncio.sleep(o["ms"] / 1000)
            await message.ack()
            if len(seen) >= o["count"]:
                done.set()

        consumer.on_error(lambda exc: None)
        started = time.perf_counter()
        await consumer.start()
        await asyncio.wait_for(done.wait(), 600)
        seconds = time.perf_counter() - started
        await consumer.stop()
    return {"seconds": seconds, "duplicates": sum(seen.values()) - len(seen)}


def _acked(
    seen: collections.Counter[str], errors: list[Exception], seconds: float
) -> dict[str, Any]:
    refused = sum(len(getattr(e, "rejected", [])) for e in errors)
    return {"seconds": seconds, "refused": refused, "duplicates": sum(seen.values()) - len(seen)}


# --- other SDKs --------------------------------------------------------------------------------


def external(command: list[str], mode: str) -> KeepRunner:
    """A runner executing ``command --mode MODE`` and reading its JSON line."""

    async def run(url: str, key: str, topic: str, o: dict[str, Any]) -> dict[str, Any]:
        args = [*command, "--mode", mode, "--topic", topic, "--messages", str(o["count"])]
        if "ms" in o:
            args += ["--handler-ms", str(o["ms"])]
        env = {**os.environ, "QUEUECORE_API_KEY": key, "QUEUECORE_URL": url}
        done = await asyncio.to_thread(
            subprocess.run, args, env=env, capture_output=True, text=True, timeout=900
        )
        if done.returncode != 0:
            raise RuntimeError(f"{command[0]} exited {done.returncode}: {done.stderr[-500:]}")
        line = [ln for ln in done.stdout.splitlines() if ln.strip().startswith("{")][-1]
        return dict(json.loads(line))

    return run


def runners(commands: dict[str, list[str]]) -> dict[str, tuple[KeepRunner, KeepRunner, KeepRunner]]:
    """Each SDK's (publish, ack, slow) programs."""
    found: dict[str, tuple[KeepRunner, KeepRunner, KeepRunner]] = {
        "python-async": (py_publish, py_async_ack, py_slow),
        "python-sync": (py_sync_publish, py_sync_ack, py_slow),
    }
    for name, command in commands.items():
        modes = ("keep-publish", "keep-ack", "keep-slow")
        found[name] = (
            external(command, modes[0]),
            external(command, modes[1]),
            external(command, modes[2]),
        )
    return found


# --- the run -----------------------------------------------------------------------------------


class Tenant:
    """A Developer-tier key on the stack, and the REST calls around each program."""

    def __init__(self, url: str, key: str) -> None:
        self.url, self.key = url, key
        self.http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60
        )

    def topic(self, name: str, partitions: int) -> str:
        """A new topic; what a Developer tenant may have at once is bounded, so it is deleted after."""
        answer = self.http.post("/v1/topics", json={"name": name, "partitions": partitions})
        answer.raise_for_status()
        return name

    def fill(self, topic: str, count: int) -> None:
        """``count`` messages in batches of 1,000 (two requests for 2,000)."""
        for first in range(0, count, 1000):
            batch = [{"data": {"n": n}} for n in range(first, min(first + 1000, count))]
            self.http.post(
                f"/v1/topics/{topic}/messages/batch", json={"messages": batch}
            ).raise_for_status()

    def configure(self, topic: str, **config: Any) -> None:
        """The group's settings before the program joins."""
        self.http.put(f"/v1/topics/{topic}/groups/keep", json=config).raise_for_status()

    def group(self, topic: str) -> tuple[int, int]:
        """The group's lag and dead-letter depth."""
        group = self.http.get(f"/v1/topics/{topic}/groups/keep").json()
        return sum(p["lag"] for p in group["partitions"]), int(group["deadLetters"])

    def drop(self, topic: str) -> None:
        """Delete the topic (a Developer tenant has at most 10)."""
        self.http.delete(f"/v1/topics/{topic}")
        time.sleep(1.1)  # the consume and admin budgets refill


async def measure(
    tenant: Tenant, name: str, progs: tuple[KeepRunner, ...], o: Any
) -> dict[str, Any]:
    """One SDK's three figures, or the error that stopped it."""
    slug = name.replace("-", "")
    row: dict[str, Any] = {"client": name}
    try:
        topic = tenant.topic(f"keep.{slug}.pub", 3)
        row["publish"] = await progs[0](tenant.url, tenant.key, topic, {"count": o.keep_publishes})
        tenant.drop(topic)
        topic = tenant.topic(f"keep.{slug}.ack", 3)
        tenant.fill(topic, o.keep_acks)
        tenant.configure(topic, startFrom="earliest")
        row["ack"] = await progs[1](tenant.url, tenant.key, topic, {"count": o.keep_acks})
        row["ack"]["lag"] = tenant.group(topic)[0]
        tenant.drop(topic)
        topic = tenant.topic(f"keep.{slug}.slow", 1)
        tenant.fill(topic, o.slow_messages)
        tenant.configure(
            topic, startFrom="earliest", ackTimeout=SLOW_ACK_TIMEOUT, deadLetter={"maxRetries": 0}
        )
        row["slow"] = await progs[2](
            tenant.url, tenant.key, topic, {"count": o.slow_messages, "ms": o.slow_ms}
        )
        row["slow"]["deadLetters"] = tenant.group(topic)[1]
        tenant.drop(topic)
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"[:300]
    return row


def report(rows: list[dict[str, Any]], o: Any) -> str:
    """A Markdown table of the keeping-up run."""
    allowed = o.keep_publishes / 100
    lines = [
        "",
        f"Keeping up on the Developer tier, default settings: {o.keep_publishes} concurrent publishes"
        f" (one request each would take {allowed:.0f} s at 100 a second); {o.keep_acks} messages acked"
        f" one by one; {o.slow_messages} messages of {o.slow_ms} ms behind a {SLOW_ACK_TIMEOUT} ack"
        " timeout, maxRetries 0",
        "",
        "| client | publish s (requests) | ack s | refused | lag after | slow s | dead letters | duplicates |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['client']} | {row['error']} | | | | | | |")
            continue
        pub, ack, slow = row["publish"], row["ack"], row["slow"]
        requests = f" ({pub['requests']})" if "requests" in pub else ""
        lines.append(
            f"| {row['client']} | {pub['seconds']:.2f}{requests} | {ack['seconds']:.1f} |"
            f" {ack['refused']} | {ack['lag']} | {slow['seconds']:.1f} | {slow['deadLetters']} |"
            f" {slow['duplicates']} |"
        )
    return "\n".join(lines)


async def run_all(url: str, key: str, chosen: dict[str, Any], o: Any) -> list[dict[str, Any]]:
    """Every chosen SDK, one after another, on one Developer tenant."""
    tenant = Tenant(url, key)
    return [await measure(tenant, name, progs, o) for name, progs in chosen.items()]
