"""Consume+ack throughput of the peers, over the same number of pre-published 1 KiB messages.

Redis Streams: one consumer group, ``consumers`` connections each sending ``XACK`` of its last
batch and the next ``XREADGROUP COUNT n`` in one pipeline. RabbitMQ: a quorum queue,
``consumers`` connections with manual acks, ``prefetch`` unacknowledged messages each, acked with
``multiple=True`` every ``ack_every`` messages. Both are verified empty at the end.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from benchmarks.cpu import CpuWatch, shares
from benchmarks.load import PAYLOAD_BYTES
from benchmarks.peers import ConfirmingPublisher, _callback
from infra.embedded import HOST

STREAM = "bench.drain"
GROUP = "drain"
PUBLISH_BATCH = 1000
PUBLISHERS = 4


@dataclass
class Drain:
    """One group consuming and acking a pre-published backlog until nothing is left."""

    messages: int
    consumers: int
    prepublish_s: float = 0.0
    elapsed_s: float = 0.0
    acked: int = 0
    redelivered: int = 0
    verified: str = "not verified"
    requests: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def msgs_per_s(self) -> float:
        """Messages acked per second, from the first read to an empty backlog."""
        return self.acked / self.elapsed_s if self.elapsed_s else 0.0

    def as_dict(self) -> dict[str, Any]:
        """Plain values for the JSON report."""
        return {
            "messages": self.messages,
            "consumers": self.consumers,
            "acked": self.acked,
            "redelivered": self.redelivered,
            "requests": self.requests,
            "elapsed_s": round(self.elapsed_s, 3),
            "msgs_per_s": round(self.msgs_per_s, 1),
            "mb_per_s": round(self.msgs_per_s * PAYLOAD_BYTES / 1e6, 2),
            "prepublish_s": round(self.prepublish_s, 2),
            "prepublish_msgs_per_s": round(self.messages / self.prepublish_s, 1)
            if self.prepublish_s
            else None,
            "verified": self.verified,
            **self.extra,
        }


# --- Redis Streams ------------------------------------------------------------------------------


async def redis_drain(
    port: int, payloads: list[str], messages: int, consumers: int, groups: dict[str, int]
) -> Drain:
    """XADD ``messages`` in pipelines of 1,000; then ``consumers`` read and ack them all."""
    from redis.asyncio import Connection

    result = Drain(messages, consumers)
    conns = [Connection(host=HOST, port=port, protocol=2) for _ in range(consumers)]
    for conn in conns:
        await conn.connect()
    try:
        began = time.perf_counter()
        await _redis_prepublish(conns[0], payloads, messages)
        result.prepublish_s = time.perf_counter() - began
        await conns[0].send_command("XGROUP", "CREATE", STREAM, GROUP, "0")
        await conns[0].read_response()
        began = time.perf_counter()
        with CpuWatch(groups) as watch:
            await asyncio.gather(
                *(_redis_consumer(c, f"c{i}", result) for i, c in enumerate(conns))
            )
        result.elapsed_s = time.perf_counter() - began
        result.extra.update(shares(watch))
        await conns[0].send_command("XPENDING", STREAM, GROUP)
        pending = (await conns[0].read_response())[0]
        result.verified = (
            "ok: XPENDING 0, every message acked"
            if pending == 0 and result.acked == messages
            else f"FAILED: {pending} pending, {result.acked} of {messages} acked"
        )
    finally:
        for conn in conns:
            await conn.disconnect()
    return result


async def _redis_prepublish(conn: Any, payloads: list[str], messages: int) -> None:
    commands = [("XADD", STREAM, "*", "data", p.encode()) for p in payloads]
    for start in range(0, messages, PUBLISH_BATCH):
        size = min(PUBLISH_BATCH, messages - start)
        batch = [commands[(start + i) % len(commands)] for i in range(size)]
        await conn.send_packed_command(conn.pack_commands(batch), False)
        for _ in range(size):
            await conn.read_response()


async def _redis_consumer(conn: Any, name: str, result: Drain) -> None:
    """Ack the previous batch and read the next in one round trip, until nothing is new."""
    read = ("XREADGROUP", "GROUP", GROUP, name, "COUNT", PUBLISH_BATCH, "STREAMS", STREAM, ">")
    ids: list[bytes] = []
    while True:
        commands = [("XACK", STREAM, GROUP, *ids), read] if ids else [read]
        await conn.send_packed_command(conn.pack_commands(commands), False)
        result.requests += 1
        if ids:
            acked = int(await conn.read_response())  # read before adding: others add too
            result.acked += acked
        reply = await conn.read_response()
        ids = [entry[0] for entry in reply[0][1]] if reply else []
        if not ids:
            return


# --- RabbitMQ -----------------------------------------------------------------------------------


async def rabbitmq_drain(
    port: int,
    payloads: list[str],
    messages: int,
    consumers: int,
    prefetch: int,
    ack_every: int,
    groups: dict[str, int],
) -> Drain:
    """Publish ``messages`` with confirms to a quorum queue; then drain it with manual acks."""
    result = Drain(messages, consumers, extra={"prefetch": prefetch, "ack_every": ack_every})
    bodies = [p.encode() for p in payloads]
    began = time.perf_counter()
    await _rabbit_prepublish(port, bodies, messages)
    result.prepublish_s = time.perf_counter() - began
    done = asyncio.get_running_loop().create_future()
    shared = _Shared(messages, done)
    readers = [_RabbitConsumer(port, prefetch, ack_every, shared) for _ in range(consumers)]
    try:
        for reader in readers:
            await reader.open()
        began = time.perf_counter()
        with CpuWatch(groups) as watch:
            for reader in readers:
                reader.consume()
            await asyncio.wait_for(done, timeout=max(60.0, messages / 500))
            for reader in readers:
                reader.flush()
            # A synchronous round trip per channel: the broker has read every ack sent before.
            for reader in readers:
                await reader.round_trip()
        result.elapsed_s = time.perf_counter() - began
        result.extra.update(shares(watch))
        result.acked = shared.acked
        result.redelivered = shared.redelivered
        result.requests = sum(reader.ack_frames for reader in readers)
    finally:
        for reader in readers:
            await reader.close()
    left = await _rabbit_ready(port)
    result.verified = (
        "ok: queue empty after the consumers closed (nothing requeued)"
        if left == 0 and result.acked == messages
        else f"FAILED: {left} messages left, {result.acked} of {messages} acked"
    )
    return result


async def _rabbit_prepublish(port: int, bodies: list[bytes], messages: int) -> None:
    publishers = [ConfirmingPublisher(port, STREAM) for _ in range(PUBLISHERS)]
    starts = list(range(0, messages, PUBLISH_BATCH))
    try:
        for publisher in publishers:
            await publisher.open()

        async def publish(index: int) -> None:
            for start in starts[index::PUBLISHERS]:
                size = min(PUBLISH_BATCH, messages - start)
                await publishers[index].publish(
                    [bodies[(start + i) % len(bodies)] for i in range(size)]
                )

        await asyncio.gather(*(publish(i) for i in range(PUBLISHERS)))
    finally:
        for publisher in publishers:
            await publisher.close()


@dataclass
class _Shared:
    total: int
    done: asyncio.Future[None]
    received: int = 0
    acked: int = 0
    redelivered: int = 0


class _RabbitConsumer:
    """One connection and channel consuming the queue with manual, multiple acks."""

    def __init__(self, port: int, prefetch: int, ack_every: int, shared: _Shared) -> None:
        self.publisher = ConfirmingPublisher(port, STREAM)  # its open() declares the queue
        self.prefetch = prefetch
        self.ack_every = ack_every
        self.shared = shared
        self.unacked = 0
        self.last_tag = 0
        self.ack_frames = 0

    async def open(self) -> None:
        """Connect, declare the queue, set the prefetch."""
        await self.publisher.open()
        await _callback(
            lambda cb: self.publisher.channel.basic_qos(prefetch_count=self.prefetch, callback=cb)
        )

    def consume(self) -> None:
        """Start delivery to :meth:`_on_message`."""
        self.publisher.channel.basic_consume(STREAM, self._on_message, auto_ack=False)

    def _on_message(self, channel: Any, method: Any, _properties: Any, _body: bytes) -> None:
        shared = self.shared
        shared.received += 1
        shared.redelivered += bool(method.redelivered)
        self.unacked += 1
        self.last_tag = method.delivery_tag
        if self.unacked >= self.ack_every:
            self.flush()
        if shared.received >= shared.total and not shared.done.done():
            shared.done.set_result(None)

    def flush(self) -> None:
        """Ack everything received so far on this channel with one ``multiple`` ack."""
        if self.unacked:
            self.publisher.channel.basic_ack(self.last_tag, multiple=True)
            self.shared.acked += self.unacked
            self.ack_frames += 1
            self.unacked = 0

    async def round_trip(self) -> None:
        """A request the broker answers only after reading what was sent before it."""
        await _callback(
            lambda cb: self.publisher.channel.basic_qos(prefetch_count=self.prefetch, callback=cb)
        )

    async def close(self) -> None:
        """Close the connection."""
        await self.publisher.close()


async def _rabbit_ready(port: int) -> int:
    """Messages left in the queue (ready ones; unacked ones were requeued when we closed)."""
    probe = ConfirmingPublisher(port, STREAM)
    await probe.open()
    try:
        frame = await _callback(
            lambda cb: probe.channel.queue_declare(STREAM, passive=True, callback=cb)
        )
        return int(frame.method.message_count)
    finally:
        await probe.close()
