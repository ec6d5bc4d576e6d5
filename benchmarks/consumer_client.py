"""The benchmark's consumer side of QueueCore: batched acker and the wire shapes it reads."""

from __future__ import annotations

import asyncio
import time

import msgspec

from benchmarks import rawhttp
from benchmarks._stack import Stack
from benchmarks.publish import JSON_HEADERS
from infra.embedded import HOST

ACK_MAX = 1000  # ids per ack request; more accumulate while one is in flight


class Stamp(msgspec.Struct):
    """What the e2e publisher puts in ``data``: index, scheduled send time, padding."""

    i: int
    t: float


class StreamedMessage(msgspec.Struct, rename="camel"):
    """The fields of an SSE delivery the benchmark reads."""

    data: Stamp
    partition: int
    ack_id: str
    attempt: int


class PulledMessage(msgspec.Struct, rename="camel"):
    """The fields of a pulled delivery the benchmark reads (``data`` is skipped)."""

    partition: int
    offset: int
    attempt: int
    ack_id: str


class Pulled(msgspec.Struct):
    """A pull response."""

    messages: list[PulledMessage]


STREAMED = msgspec.json.Decoder(StreamedMessage)
PULLED = msgspec.json.Decoder(Pulled)


class Acker:
    """Acks a member's deliveries in batches: whatever arrived while the last ack was in flight,
    up to :data:`ACK_MAX` ids per request, across partitions (an ack locks its partitions in
    partition order, as pulls do, so it cannot deadlock with the member's next pull)."""

    def __init__(self, stack: Stack, topic: str, group: str) -> None:
        self.connection = rawhttp.Connection(HOST, stack.http_port)
        self.path = f"/v1/topics/{topic}/groups/{group}/ack"
        self.headers = {**stack.auth_headers(), **JSON_HEADERS}
        self.port = stack.http_port
        self.pending: list[str] = []
        self.acked = 0
        self.requests = 0
        self.busy_s = 0.0  # time spent waiting for ack responses
        self.rejected: list[str] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.task = asyncio.get_running_loop().create_task(self._run())

    def add(self, partition: int, ack_ids: list[str]) -> None:
        """Queue ids (of any partition) for the next ack request."""
        self.pending.extend(ack_ids)
        self._idle.clear()
        self._wake.set()

    async def flush(self) -> None:
        """Wait until every queued id was acked (or refused)."""
        await self._idle.wait()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.pending:
                batch, self.pending = self.pending[:ACK_MAX], self.pending[ACK_MAX:]
                await self._ack(batch)
            self._idle.set()

    async def _ack(self, batch: list[str]) -> None:
        body = msgspec.json.encode({"ackIds": batch})
        request = rawhttp.build_request(HOST, self.port, self.path, self.headers, body)
        began = time.perf_counter()
        status, answer = await self.connection.send(request)
        self.busy_s += time.perf_counter() - began
        self.requests += 1
        if status == 200:
            self.acked += len(msgspec.json.decode(answer)["acked"])
        else:
            self.rejected.append(f"{status} {answer[:200].decode(errors='replace')}")

    def close(self) -> None:
        """Stop acking and drop the connection."""
        self.task.cancel()
        self.connection.close()
