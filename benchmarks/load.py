"""Load patterns shared by QueueCore and its peers: closed-loop throughput and open-loop latency.

A closed loop keeps N clients busy back to back and counts what completes inside the window.
An open loop sends on a fixed timetable whatever happens to earlier requests, and measures each
request from its *scheduled* send time, so a stall shows up as latency instead of as fewer sends
(no coordinated omission).
"""

from __future__ import annotations

import asyncio
import random
import string
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

PAYLOAD_BYTES = 1024
ERROR_BACKOFF_S = 0.01

# One unit of work: sends its request(s) and returns how many messages were acknowledged.
Send = Callable[[int], Awaitable[int]]
# One timed publish: returns the server-reported latency in ms when it gives one.
Probe = Callable[[], Awaitable[float | None]]
# The same, told its index and scheduled send time (``time.monotonic()``), to stamp in a message.
StampedProbe = Callable[[int, float], Awaitable[float | None]]


@dataclass
class Throughput:
    """What a closed loop achieved inside its measurement window."""

    messages: int = 0
    requests: int = 0
    errors: int = 0
    elapsed_s: float = 0.0
    error_samples: list[str] = field(default_factory=list)

    @property
    def msgs_per_s(self) -> float:
        """Acknowledged messages per second."""
        return self.messages / self.elapsed_s if self.elapsed_s else 0.0

    @property
    def mb_per_s(self) -> float:
        """Acknowledged payload, in MB (10^6 bytes) per second."""
        return self.msgs_per_s * PAYLOAD_BYTES / 1e6

    def as_dict(self) -> dict[str, Any]:
        """Plain values for the JSON report."""
        return {
            "messages": self.messages,
            "requests": self.requests,
            "errors": self.errors,
            "elapsed_s": round(self.elapsed_s, 3),
            "msgs_per_s": round(self.msgs_per_s, 1),
            "mb_per_s": round(self.mb_per_s, 2),
            "error_samples": self.error_samples[:5],
        }


@dataclass
class Latency:
    """What an open loop measured: latencies from scheduled send time, in ms."""

    rate_per_s: float
    sent: int = 0
    errors: int = 0
    acknowledged_total: int = 0  # warm-up included
    unanswered: int = 0  # still waiting when the drain ended: the rate was not sustained
    elapsed_s: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    server_latencies_ms: list[float] = field(default_factory=list)
    error_samples: list[str] = field(default_factory=list)

    def percentile(self, q: float, server: bool = False) -> float | None:
        """Nearest-rank percentile ``q`` (0 to 100) of the client (or server-reported) latencies."""
        values = sorted(self.server_latencies_ms if server else self.latencies_ms)
        if not values:
            return None
        rank = max(1, min(len(values), round(q / 100 * len(values) + 0.5)))
        return values[rank - 1]

    def as_dict(self) -> dict[str, Any]:
        """Plain values for the JSON report."""
        return {
            "rate_per_s": self.rate_per_s,
            "sent": self.sent,
            "ok": len(self.latencies_ms) - self.unanswered,
            "errors": self.errors,
            "acknowledged_total": self.acknowledged_total,
            "unanswered": self.unanswered,
            "elapsed_s": round(self.elapsed_s, 3),
            "p50_ms": self.percentile(50),
            "p99_ms": self.percentile(99),
            "p999_ms": self.percentile(99.9),
            "max_ms": self.percentile(100),
            "server_p50_ms": self.percentile(50, server=True),
            "server_p99_ms": self.percentile(99, server=True),
            "error_samples": self.error_samples[:5],
        }


async def closed_loop(send: Send, clients: int, duration_s: float, warmup_s: float) -> Throughput:
    """Run ``clients`` back-to-back loops; count completions in ``[warmup, warmup + duration]``."""
    result = Throughput()
    start = time.perf_counter() + warmup_s
    end = start + duration_s

    async def client(index: int) -> None:
        while (now := time.perf_counter()) < end:
            try:
                acknowledged = await send(index)
            except Exception as exc:
                if now >= start:
                    result.errors += 1
                    result.error_samples.append(f"{type(exc).__name__}: {exc}"[:300])
                await asyncio.sleep(ERROR_BACKOFF_S)
                continue
            if start <= time.perf_counter() <= end:
                result.messages += acknowledged
                result.requests += 1

    await asyncio.gather(*(client(i) for i in range(clients)))
    result.elapsed_s = duration_s
    return result


async def open_loop(
    probe: Probe,
    rate_per_s: float,
    duration_s: float,
    warmup_s: float,
    max_in_flight: int,
    drain_s: float,
) -> Latency:
    """Send at ``rate_per_s`` on a fixed timetable; record sends scheduled after the warm-up.

    At most ``max_in_flight`` requests are outstanding (one per client connection); a send due
    while all are busy waits for one, and that wait counts in its latency. When the timetable
    ends, unanswered sends get ``drain_s`` more; any still waiting then are cancelled and counted
    as ``unanswered`` with their wait so far as latency (a lower bound: the system saturated).
    """

    async def unstamped(_index: int, _scheduled: float) -> float | None:
        return await probe()

    return await open_loop_stamped(
        unstamped, rate_per_s, duration_s, warmup_s, max_in_flight, drain_s
    )


async def open_loop_stamped(
    probe: StampedProbe,
    rate_per_s: float,
    duration_s: float,
    warmup_s: float,
    max_in_flight: int,
    drain_s: float,
) -> Latency:
    """:func:`open_loop`, with each probe given its index and scheduled time.

    Times are ``time.monotonic()``, not ``loop.time()``: uvloop's clock ticks in whole
    milliseconds and is read once per loop iteration, so on a busy loop it lags and makes
    latencies look shorter than they were.
    """
    result = Latency(rate_per_s)
    slots = asyncio.Semaphore(max_in_flight)
    total = int((warmup_s + duration_s) * rate_per_s)
    warm = int(warmup_s * rate_per_s)
    loop = asyncio.get_running_loop()
    began = time.monotonic() + 0.05
    pending: dict[asyncio.Task[None], tuple[int, float]] = {}

    async def one(index: int, scheduled: float) -> None:
        try:
            async with slots:
                server_ms = await probe(index, scheduled)
        except Exception as exc:
            if index >= warm:
                result.errors += 1
                result.error_samples.append(f"{type(exc).__name__}: {exc}"[:300])
            return
        result.acknowledged_total += 1
        if index >= warm:
            result.latencies_ms.append((time.monotonic() - scheduled) * 1000)
            if server_ms is not None:
                result.server_latencies_ms.append(server_ms)

    for index in range(total):
        scheduled = began + index / rate_per_s
        delay = scheduled - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        task = loop.create_task(one(index, scheduled))
        pending[task] = (index, scheduled)
        task.add_done_callback(lambda done: pending.pop(done, None))
    if pending:
        await asyncio.wait(list(pending), timeout=drain_s)
    cancelled = _give_up(pending, result, warm, time.monotonic())
    await asyncio.gather(*cancelled, return_exceptions=True)
    result.sent = total - warm
    result.elapsed_s = time.monotonic() - (began + warmup_s)
    return result


def _give_up(
    pending: dict[asyncio.Task[None], tuple[int, float]], result: Latency, warm: int, now: float
) -> list[asyncio.Task[None]]:
    """Cancel what the drain did not finish; its wait so far counts as (censored) latency."""
    tasks = list(pending)
    for task, (index, scheduled) in list(pending.items()):
        task.cancel()
        if index >= warm:
            result.unanswered += 1
            result.latencies_ms.append((now - scheduled) * 1000)
    return tasks


def payloads(count: int = 1000, size: int = PAYLOAD_BYTES, seed: int = 7) -> list[str]:
    """``count`` distinct printable payloads of ``size`` bytes, the same for every system.

    Random characters, so compression (QueueCore's segments are zstd) gains little, as with real
    data; distinct per message, so a batch is not one payload repeated.
    """
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits + "-_"
    return ["".join(rng.choices(alphabet, k=size)) for _ in range(count)]
