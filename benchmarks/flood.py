"""The flooding tenant of the noisy-neighbour phase, in a process of its own.

``python -m benchmarks.flood PORT KEY TOPIC --clients N --seconds S`` posts batches of 100
messages of 1 KiB back to back on N keep-alive connections for S seconds and prints one JSON line:
messages stored, requests answered 201, answered 429 (its tier's rate limit) and other failures.
A process of its own so the quiet tenant's probe, in the benchmark's process, measures the API
and not a load generator busy sending the flood.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

import msgspec

from benchmarks import rawhttp
from benchmarks.load import payloads
from infra.embedded import HOST

BATCH = 100
RETRY_AFTER_CAP_S = 0.05  # a 429 pauses that client briefly, then it floods again


async def flood(port: int, key: str, topic: str, clients: int, seconds: float) -> dict[str, Any]:
    """Batches back to back on ``clients`` connections until ``seconds`` have passed."""
    texts = payloads()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    path = f"/v1/topics/{topic}/messages/batch"
    requests = [
        rawhttp.build_request(
            HOST,
            port,
            path,
            headers,
            msgspec.json.encode({"messages": [{"data": p} for p in texts[i : i + BATCH]]}),
        )
        for i in range(0, len(texts), BATCH)
    ]
    counts: dict[str, Any] = {"messages": 0, "requests": 0, "limited": 0, "failed": 0}
    end = time.monotonic() + seconds

    async def client(index: int) -> None:
        connection = rawhttp.Connection(HOST, port)
        turn = index
        while time.monotonic() < end:
            turn += clients
            try:
                status, _ = await connection.send(requests[turn % len(requests)])
            except OSError:
                counts["failed"] += 1
                await asyncio.sleep(RETRY_AFTER_CAP_S)
                continue
            if status == 201:
                counts["messages"] += BATCH
                counts["requests"] += 1
            elif status == 429:
                counts["limited"] += 1
                await asyncio.sleep(RETRY_AFTER_CAP_S)
            else:
                counts["failed"] += 1
        connection.close()

    began = time.monotonic()
    await asyncio.gather(*(client(i) for i in range(clients)))
    counts["elapsed_s"] = round(time.monotonic() - began, 3)
    return counts


def main(argv: list[str] | None = None) -> int:
    """Flood, then print the counts as one JSON line."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.flood")
    parser.add_argument("port", type=int)
    parser.add_argument("key")
    parser.add_argument("topic")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    result = asyncio.run(flood(args.port, args.key, args.topic, args.clients, args.seconds))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
