"""What idle consumers cost: ``python -m benchmarks.idle [--streams N] [--polls N] [--seconds S]``.

Idle SSE streams and idle long-poll loops must not burn CPU. This starts a private
stack, measures the API's CPU (the whole ``queuecore serve`` process tree) over a quiet window
with no consumer at all, then again with ``streams`` open SSE streams and ``polls`` members
long-polling (``waitMs`` 30 s) on a topic nobody publishes to, and prints both.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

from benchmarks._stack import Stack
from benchmarks.publish import _step

TOPIC, GROUP = "idle.events", "idle"
STREAM = httpx.Timeout(10, read=120)  # the server sends a keep-alive comment every 15 s


def main(argv: list[str] | None = None) -> int:
    """Run the measurement and print one line per window."""
    args = _parse(argv)
    with tempfile.TemporaryDirectory(prefix="queuecore-idle-") as root:
        stack = Stack(Path(root), args.workers)
        try:
            _step("starting the stack")
            stack.start_services()
            stack.start_api()
            stack.create_tenant()
            stack.create_topic(TOPIC, "express", partitions=8)
            baseline = _api_cpu_pct(stack, args.seconds)
            stop = threading.Event()
            _open_consumers(stack, args.streams, args.polls, stop)
            time.sleep(3)  # every stream and poll is connected and waiting
            loaded = _api_cpu_pct(stack, args.seconds)
            stop.set()
        finally:
            stack.stop()
    print(f"API CPU, no consumers: {baseline:.2f}% of one core over {args.seconds:g} s")
    print(
        f"API CPU, {args.streams} idle SSE streams + {args.polls} idle long-polls: "
        f"{loaded:.2f}% of one core (+{loaded - baseline:.2f})"
    )
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.idle", description=__doc__)
    parser.add_argument("--streams", type=int, default=10)
    parser.add_argument("--polls", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--workers", type=int, default=2)
    return parser.parse_args(argv)


def _api_cpu_pct(stack: Stack, seconds: float) -> float:
    assert stack.serve is not None
    root = psutil.Process(stack.serve.pid)
    procs = [root, *root.children(recursive=True)]

    def cpu() -> float:
        return sum(sum(p.cpu_times()[:2]) for p in procs)

    before, began = cpu(), time.monotonic()
    time.sleep(seconds)
    return (cpu() - before) / (time.monotonic() - began) * 100


def _open_consumers(stack: Stack, streams: int, polls: int, stop: threading.Event) -> None:
    client = httpx.Client(base_url=stack.base_url, headers=stack.auth_headers(), timeout=60)
    prefix = f"/v1/topics/{TOPIC}/groups/{GROUP}"
    client.put(prefix, json={"startFrom": "latest"}).raise_for_status()
    for index in range(streams + polls):
        joined = client.post(f"{prefix}/members", json={"sessionTimeout": "120s"})
        member = joined.raise_for_status().json()["memberId"]
        target = _stream if index < streams else _poll
        threading.Thread(target=target, args=(stack, prefix, member, stop), daemon=True).start()


def _stream(stack: Stack, prefix: str, member: str, stop: threading.Event) -> None:
    with (
        httpx.Client(base_url=stack.base_url, headers=stack.auth_headers(), timeout=STREAM) as c,
        c.stream("GET", f"{prefix}/members/{member}/stream") as response,
    ):
        for _ in response.iter_lines():
            if stop.is_set():
                return


def _poll(stack: Stack, prefix: str, member: str, stop: threading.Event) -> None:
    with httpx.Client(base_url=stack.base_url, headers=stack.auth_headers(), timeout=60) as c:
        while not stop.is_set():
            c.post(f"{prefix}/members/{member}/pull", json={"maxMessages": 10, "waitMs": 30000})


if __name__ == "__main__":
    sys.exit(main())
