"""Fair shares between organisations in delivery: the lease statements a process runs at once.

A pull (a long-poll's or a stream's) takes a slot before it takes a pooled connection, and gives
it back once the connection is returned; a long-poll waiting for messages holds none. While a
slot is free a pull takes it at once (no task switch). When all are taken, pulls wait in one
queue per organisation, oldest first, and a freed slot goes to an organisation by weighted round
robin in its per-grant form (start-time fair queueing): each grant costs an organisation
``1 / weight`` of virtual time (its tier's weight, :func:`tenants.tiers.tier_weight`) and the
waiting organisation with the earliest tag is served, so under contention grants follow the
weights (10:1 gives ten to one) interleaved, not in bursts of ``weight``. An organisation that
starts waiting starts at the current virtual time: no credit for its idle time, and a newcomer
is served within about one grant. While another organisation waits, one organisation holds at
most ``cap`` slots (by default all but one); alone, it may hold them all.

The slots (``QUEUECORE_DELIVERY_PULLS_IN_FLIGHT``, by default three quarters of the pool) are
fewer than the pool's connections, so publishes, acks and heartbeats always find one. The
writer's share between organisations is :mod:`data_plane.write.fair`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from fractions import Fraction  # exact tags: 10 grants of 1/10 make exactly 1

MAX_TAGS = 4096  # organisations remembered after they stop waiting, before the stale are pruned


def _weight_one(organisation_id: str) -> int:
    return 1


def _forever() -> float | None:
    return None


class PullShares:
    """Slots for lease statements in flight, granted to waiting organisations by their weights."""

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
        self._queues: dict[str, deque[asyncio.Future[None]]] = {}  # in order of first wait
        self._weights: dict[str, int] = {}  # of the organisations waiting
        self._now = Fraction(0)  # virtual time: the tag of the last grant
        # Each organisation's next start tag (for one no longer waiting: where its last grant
        # ended, so leaving and coming back gains nothing).
        self._tags: dict[str, Fraction] = {}

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
        while self.free and self._queues:
            owner = self._next()
            queue = self._queues[owner]
            granted = queue.popleft()
            if not granted.done():  # done: cancelled, its task not yet resumed to forget it
                self._now = self._tags[owner]
                self._tags[owner] += Fraction(1, self._weights[owner])
                self.free -= 1
                self._held[owner] = self._held.get(owner, 0) + 1
                granted.set_result(None)
            if not queue:
                self._drop(owner)

    def _enqueue(self, organisation_id: str, granted: asyncio.Future[None]) -> None:
        queue = self._queues.get(organisation_id)
        if queue is None:
            queue = self._queues[organisation_id] = deque()
            self._weights[organisation_id] = max(1, self._weight_of(organisation_id))
            self._tags[organisation_id] = max(self._now, self._tags.get(organisation_id, self._now))
        queue.append(granted)

    def _next(self) -> str:
        """The waiting organisation with the earliest tag; while several wait, one at its cap
        is passed over (unless all are)."""
        waiting = list(self._queues)
        if len(waiting) > 1:
            waiting = [o for o in waiting if self._held.get(o, 0) < self.cap] or waiting
        return min(waiting, key=self._tags.__getitem__)  # a tie: the one waiting longest

    def _forget(self, organisation_id: str, granted: asyncio.Future[None]) -> None:
        queue = self._queues.get(organisation_id)
        if queue is None or granted not in queue:
            return
        queue.remove(granted)
        if not queue:
            self._drop(organisation_id)

    def _drop(self, organisation_id: str) -> None:
        del self._queues[organisation_id]
        del self._weights[organisation_id]
        if len(self._tags) > MAX_TAGS:
            now = self._now
            self._tags = {o: t for o, t in self._tags.items() if t > now or o in self._queues}
