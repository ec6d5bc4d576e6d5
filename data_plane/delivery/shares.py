"""Fair shares between organisations in delivery: the lease statements a process runs at once.

A pull (a long-poll's or a stream's) takes a slot before it takes a pooled connection, and gives
it back once the connection is returned; a long-poll waiting for messages holds none. While a
slot is free a pull takes it at once (no task switch). When all are taken, pulls wait in one
queue per organisation and a freed slot goes to the next organisation by weighted deficit round
robin (each pull costs 1; each turn adds the organisation's tier weight,
:func:`tenants.tiers.tier_weight`), oldest pull first within an organisation. While another
organisation waits, one organisation holds at most ``cap`` slots, so a quiet organisation's pull
waits for at most one release; alone, an organisation may hold them all.

The slots (``QUEUECORE_DELIVERY_PULLS_IN_FLIGHT``, by default three quarters of the pool) are
fewer than the pool's connections, so publishes, acks and heartbeats always find one. The writer's share between organisations is :mod:`data_plane.write.fair`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable


def _weight_one(organisation_id: str) -> int:
    return 1


def _forever() -> float | None:
    return None


class PullShares:
    """Slots for lease statements in flight, granted to waiting organisations by weighted DRR."""

    def __init__(
        self,
        slots: int,
        cap: int | None = None,
        weight_of: Callable[[str], int] = _weight_one,
        patience_s: Callable[[], float | None] = _forever,
    ) -> None:
        self.slots = slots
        self.cap = cap if cap is not None else max(1, slots - 1)  # one comes free for the others
        self.free = slots
        self._weight_of = weight_of  # asked only when an organisation starts waiting
        self._patience_s = patience_s  # how long a pull may wait (None: as long as it takes)
        self._held: dict[str, int] = {}
        self._queues: dict[str, deque[asyncio.Future[None]]] = {}
        self._ring: deque[str] = deque()  # organisations waiting, the next served first
        self._deficit: dict[str, int] = {}
        self._weights: dict[str, int] = {}

    def held(self, organisation_id: str) -> int:
        """Slots the organisation holds."""
        return self._held.get(organisation_id, 0)

    def waiting(self, organisation_id: str) -> int:
        """Pulls of the organisation waiting for a slot."""
        return len(self._queues.get(organisation_id, ()))

    async def acquire(self, organisation_id: str) -> None:
        """Take a slot for the organisation, waiting for its turn when none is free;
        :class:`TimeoutError` after ``patience_s()``."""
        if self.free:  # then nobody waits: a release grants every free slot it can
            self.free -= 1
            self._held[organisation_id] = self._held.get(organisation_id, 0) + 1
            return
        granted = asyncio.get_running_loop().create_future()
        self._enqueue(organisation_id, granted)
        try:
            async with asyncio.timeout(self._patience_s()):
                await granted
        except BaseException:  # cancelled (the client went away) or out of time
            if granted.done() and not granted.cancelled():
                self.release(organisation_id)  # granted as its caller gave up: pass it on
            else:
                self._forget(organisation_id, granted)
            raise

    def release(self, organisation_id: str) -> None:
        """Give a slot back: it goes to the next waiting organisation's oldest pull."""
        left = self._held[organisation_id] - 1
        if left:
            self._held[organisation_id] = left
        else:
            del self._held[organisation_id]
        self.free += 1
        while self.free and self._ring:
            owner = self._next()
            queue = self._queues[owner]
            granted = queue.popleft()
            if not queue:
                self._drop(owner)
            if granted.done():
                continue  # cancelled, its task not yet resumed to forget it
            self.free -= 1
            self._held[owner] = self._held.get(owner, 0) + 1
            granted.set_result(None)

    def _enqueue(self, organisation_id: str, granted: asyncio.Future[None]) -> None:
        queue = self._queues.get(organisation_id)
        if queue is None:
            queue = self._queues[organisation_id] = deque()
            self._ring.append(organisation_id)
            self._deficit[organisation_id] = 0
            self._weights[organisation_id] = max(1, self._weight_of(organisation_id))
        queue.append(granted)

    def _next(self) -> str:
        """The organisation whose pull gets the next slot (deficit round robin, cost 1)."""
        ring = self._ring
        if len(ring) > 1:  # another organisation waits: skip those at their cap
            for _ in range(len(ring)):
                if self._held.get(ring[0], 0) < self.cap:
                    break
                ring.rotate(-1)
        owner = ring[0]
        if self._deficit[owner] < 1:
            self._deficit[owner] += self._weights[owner]
        self._deficit[owner] -= 1
        if self._deficit[owner] < 1:
            ring.rotate(-1)  # its turn is used up: the next organisation's comes
        return owner

    def _forget(self, organisation_id: str, granted: asyncio.Future[None]) -> None:
        queue = self._queues.get(organisation_id)
        if queue is None or granted not in queue:
            return
        queue.remove(granted)
        if not queue:
            self._drop(organisation_id)

    def _drop(self, organisation_id: str) -> None:
        del self._queues[organisation_id]
        del self._deficit[organisation_id]  # an organisation that stops waiting keeps no credit
        del self._weights[organisation_id]
        self._ring.remove(organisation_id)
