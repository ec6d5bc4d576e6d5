"""What a pusher holds of one group: its leased messages, their acks (sent in coalesced batches)
and their leases (extended before they could end during a wait or a POST)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from data_plane.service import Delivery
from observability.logging import get_logger

log = get_logger("queuecore.pusher")

SETTLE_MARGIN_S = 5.0  # a lease must outlast a POST by this much, for its ack to land in time
MAX_ACK_BATCH = 1_000

AckCall = Callable[[list[str]], Awaitable[tuple[list[str], list[dict[str, str]]]]]
ExtendCall = Callable[[list[str], int], Awaitable[list[str]]]


@dataclass(slots=True)
class Held:
    """A leased message the pusher holds, and when (by its clock) its lease ends."""

    delivery: Delivery
    lease_end: float
    lost: bool = False  # its lease could not be kept: it is delivered again, not by us


class Acker:
    """Acks sent as one request while none is in flight, the ones queued meanwhile in the next
    (a group commit): one round trip per message when idle, batches under load."""

    def __init__(self, send: AckCall, settled: Callable[[list[str]], None]) -> None:
        self._send = send
        self._settled = settled
        self._queued: list[str] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    def ack(self, ack_id: str) -> None:
        """Queue one ack."""
        self._queued.append(ack_id)
        self._idle.clear()
        self._wake.set()

    async def run(self) -> None:
        """Send what is queued until cancelled."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queued:
                batch, self._queued = self._queued[:MAX_ACK_BATCH], self._queued[MAX_ACK_BATCH:]
                await self._flush(batch)
            self._idle.set()

    async def drained(self) -> None:
        """Wait until every queued ack was sent."""
        await self._idle.wait()

    async def _flush(self, batch: list[str]) -> None:
        try:
            acked, rejected = await self._send(batch)
        except Exception as exc:  # the database is away: try again shortly, nothing is lost
            log.warning("push_ack_failed", error=type(exc).__name__, count=len(batch))
            self._queued = batch + self._queued
            await asyncio.sleep(0.5)
            return
        for verdict in rejected:  # its lease ended first: it is pushed again
            log.warning("push_ack_rejected", ack_id=verdict["ackId"], reason=verdict["reason"])
        self._settled(acked + [verdict["ackId"] for verdict in rejected])


class LeaseKeeper:
    """Keeps the leases of held messages: before a POST, long enough for it and its ack; and
    every second, any that would end within a third of the ack timeout, in one request."""

    def __init__(self, held: dict[str, Held], extend: ExtendCall) -> None:
        self._held = held
        self._extend = extend
        self.ack_timeout_s = 30.0
        self.push_timeout_s = 30.0

    def lease_s(self) -> int:
        """How long an extension lasts: the ack timeout, and at least a POST and its ack."""
        return math.ceil(max(self.ack_timeout_s, self.push_timeout_s + 2 * SETTLE_MARGIN_S))

    async def cover(self, items: list[Held]) -> None:
        """Make these leases last a POST and its ack from now (extending those that would not);
        a lease that cannot be extended any more is marked lost."""
        needed = time.monotonic() + self.push_timeout_s + SETTLE_MARGIN_S
        short = [item for item in items if item.lease_end < needed and not item.lost]
        await self._extend_all(short)

    async def run(self) -> None:
        """Extend the leases about to end, every second, until cancelled."""
        while True:
            await asyncio.sleep(1.0)
            soon = time.monotonic() + max(self.ack_timeout_s / 3, SETTLE_MARGIN_S)
            due = [item for item in self._held.values() if item.lease_end < soon and not item.lost]
            try:
                await self._extend_all(due)
            except Exception as exc:  # the next round tries again
                log.warning("push_extend_failed", error=type(exc).__name__, count=len(due))

    async def _extend_all(self, items: list[Held]) -> None:
        if not items:
            return
        seconds = self.lease_s()
        started = time.monotonic()
        extended = set(await self._extend([item.delivery.ack_id for item in items], seconds))
        for item in items:
            if item.delivery.ack_id in extended:
                item.lease_end = started + seconds
            else:
                item.lost = True
