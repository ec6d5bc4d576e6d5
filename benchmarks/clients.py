"""The service clients of the hot paths, measured side by side in one run.

S3: a segment PUT and a block's range GET through the hand-written asyncio client
(``core.s3_http``), ``obstore`` (Rust, async) and boto3 (in a thread, as the cold paths use it).
Redis: the rate limiter's script (EVALSHA) through redis-py's asyncio client (hiredis's parser
when it is installed). For each: CPU microseconds of this process per
call (``time.process_time``) and wall-clock latency percentiles, with ``concurrency`` calls in
flight; the clients take turns round by round so that noise on the machine hits them alike.

    python -m benchmarks.clients [--rounds 5] [--calls 400] [--json out.json]

It starts a private SeaweedFS and Redis (embedded) unless ``QUEUECORE_S3_ENDPOINT_URL`` and
``QUEUECORE_REDIS_URL`` name servers to use. obstore is optional (``pip install obstore``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

PAYLOAD_BYTES = 256 * 1024  # a typical express flush
RANGE_BYTES = 16 * 1024  # a block a consumer reads
BUCKET = "bench-clients"
SCRIPT = "return redis.call('INCRBY', KEYS[1], ARGV[1])"

Call = Callable[[int], Awaitable[Any]]


async def measure(call: Call, calls: int, concurrency: int) -> dict[str, float]:
    """CPU µs per call and latency percentiles (ms) of ``calls`` calls, ``concurrency`` at once."""
    latencies: list[float] = []
    queue = iter(range(calls))

    async def worker() -> None:
        for n in queue:
            start = time.perf_counter()
            await call(n)
            latencies.append(time.perf_counter() - start)

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    latencies.sort()
    return {
        "cpu_us_per_call": cpu / calls * 1e6,
        "calls_per_s": calls / wall,
        "p50_ms": statistics.median(latencies) * 1e3,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1e3,
    }


def s3_clients(endpoint: str) -> dict[str, tuple[Call, Call]]:
    """(put, range get) per S3 client, all on the same bucket."""
    from core.object_store import ensure_bucket, s3_client
    from core.s3_http import Credentials, Endpoint, S3HttpClient, SigV4Signer

    ensure_bucket(endpoint, BUCKET, None, None, "us-east-1")
    payload = b"x" * PAYLOAD_BYTES
    creds = Credentials("queuecore", "queuecore")
    hand = S3HttpClient(
        Endpoint.parse(endpoint, "us-east-1"), SigV4Signer("us-east-1", lambda: creds)
    )
    boto = s3_client(endpoint, None, None, "us-east-1")
    clients: dict[str, tuple[Call, Call]] = {
        "s3_http": (
            lambda n: hand.put_object(BUCKET, f"hand/{n}", payload),
            lambda n: hand.get_object(BUCKET, f"hand/{n}", 0, RANGE_BYTES - 1),
        ),
        "boto3 (thread)": (
            lambda n: asyncio.to_thread(
                boto.put_object, Bucket=BUCKET, Key=f"boto/{n}", Body=payload
            ),
            lambda n: asyncio.to_thread(
                lambda: boto.get_object(
                    Bucket=BUCKET, Key=f"boto/{n}", Range=f"bytes=0-{RANGE_BYTES - 1}"
                )["Body"].read()
            ),
        ),
    }
    try:
        import obstore
        from obstore.store import S3Store
    except ImportError:
        return clients
    store = S3Store(
        BUCKET,
        endpoint=endpoint,
        access_key_id="queuecore",
        secret_access_key="queuecore",  # noqa: S106 (SeaweedFS accepts any key pair)
        region="us-east-1",
        virtual_hosted_style_request=False,
        client_options={"allow_http": True},
    )
    clients["obstore"] = (
        lambda n: obstore.put_async(store, f"obs/{n}", payload),
        lambda n: obstore.get_range_async(store, f"obs/{n}", start=0, length=RANGE_BYTES),
    )
    return clients


def redis_clients(url: str) -> dict[str, Call]:
    """The limiter-shaped script call per Redis client."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url)
    py_script = client.register_script(SCRIPT)
    return {
        "redis-py asyncio": lambda n: py_script(keys=[f"bench:{n % 64}"], args=[1]),
    }


async def run(args: argparse.Namespace, endpoint: str, redis_url: str) -> dict[str, Any]:
    """Every client, round by round; the median of the rounds per figure."""
    s3 = s3_clients(endpoint)
    rd = redis_clients(redis_url)
    rounds: dict[str, list[dict[str, float]]] = {}
    for _ in range(args.rounds):
        for name, (put, get) in s3.items():
            rounds.setdefault(f"S3 PUT {PAYLOAD_BYTES // 1024} KiB, {name}", []).append(
                await measure(put, args.calls, args.concurrency)
            )
            rounds.setdefault(f"S3 range GET {RANGE_BYTES // 1024} KiB, {name}", []).append(
                await measure(get, args.calls, args.concurrency)
            )
        for name, call in rd.items():
            rounds.setdefault(f"Redis EVALSHA, {name}", []).append(
                await measure(call, args.calls * 5, args.concurrency)
            )
    return {
        label: {k: round(statistics.median(r[k] for r in runs), 2) for k in runs[0]}
        for label, runs in rounds.items()
    }


def services(stack: ExitStack) -> tuple[str, str]:
    """The S3 endpoint and Redis URL: from the environment, or embedded ones started here."""
    import os

    from infra.embedded import EmbeddedRedis, EmbeddedS3, free_port_block

    endpoint = os.environ.get("QUEUECORE_S3_ENDPOINT_URL")
    redis_url = os.environ.get("QUEUECORE_REDIS_URL")
    root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="qc-clients-")))
    if not endpoint:
        s3 = EmbeddedS3(root / "s3", root / "logs", free_port_block(8), BUCKET)
        s3.start()
        stack.callback(s3.stop)
        endpoint = s3.endpoint_url
    if not redis_url:
        rd = EmbeddedRedis(root / "redis", root / "logs", free_port_block())
        rd.start()
        stack.callback(rd.stop)
        redis_url = rd.url
    return endpoint, redis_url


def main() -> None:
    """Run and print a table (and JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with ExitStack() as stack:
        endpoint, redis_url = services(stack)
        result = asyncio.run(run(args, endpoint, redis_url))
    width = max(map(len, result))
    print(f"{'':{width}}  cpu µs/call  calls/s   p50 ms   p99 ms")
    for label, r in result.items():
        print(
            f"{label:{width}}  {r['cpu_us_per_call']:11.1f}  {r['calls_per_s']:7.0f}"
            f"  {r['p50_ms']:7.2f}  {r['p99_ms']:7.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
