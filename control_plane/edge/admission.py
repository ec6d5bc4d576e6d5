"""One organisation's publishes in the works in this process are capped: a flood waits behind
its own backlog.

A publish request is admitted once its key passed the rate limit. Its body's size (its
``Content-Length``) counts against its organisation until the answer is sent; over
:data:`BYTES_PER_WEIGHT` times the organisation's weight (its tier's, see
:func:`tenants.tiers.tier_weight`) the request waits, before its body is parsed, until
the organisation's earlier requests are answered. Requests of an organisation are admitted in
arrival order; an organisation with nothing in the works is always admitted, however large its
request. Other organisations never wait for it: the event loop's queue holds at most the cap of
one organisation's work in front of another's request.

The cap holds only while the process is shared: while another organisation published within
:data:`SHARED_FOR_S`. An organisation alone on a replica uses all of it.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

BYTES_PER_WEIGHT = 32 * 1024  # a Pro organisation (weight 10): ~3 batches of 100 KiB at once
MIN_REQUEST_BYTES = 256  # a request's own cost, whatever its body
UNKNOWN_LENGTH_BYTES = 64 * 1024  # a chunked body of unknown size counts as this much
SHARED_FOR_S = 1.0  # another organisation published this recently: the caps hold


class OrgAdmission:
    """Publish work in the works per organisation, and the requests waiting for room."""

    def __init__(
        self,
        bytes_per_weight: int = BYTES_PER_WEIGHT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bytes_per_weight = bytes_per_weight
        self._clock = clock
        self._seen: dict[str, float] = {}  # organisations that published lately, and when
        self._pruned_s = 0.0
        self._inflight: dict[str, int] = {}
        self._caps: dict[str, int] = {}
        self._waiting: dict[str, deque[tuple[int, asyncio.Future[None]]]] = {}

    def inflight(self, organisation_id: str) -> int:
        """Bytes of the organisation's admitted requests not yet answered."""
        return self._inflight.get(organisation_id, 0)

    def waiting(self, organisation_id: str) -> int:
        """Requests of the organisation waiting for room."""
        return len(self._waiting.get(organisation_id, ()))

    async def acquire(self, organisation_id: str, weight: int, size: int) -> None:
        """Wait until the organisation has room for ``size`` more bytes, and take them."""
        self._caps[organisation_id] = max(1, weight) * self.bytes_per_weight
        self._saw(organisation_id)
        if organisation_id not in self._waiting and self._fits(organisation_id, size):
            self._inflight[organisation_id] = self.inflight(organisation_id) + size
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._waiting.setdefault(organisation_id, deque())
        queue.append((size, granted))
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self.release(organisation_id, size)  # admitted as its caller gave up
            else:
                self._forget(organisation_id, granted)
            raise

    def release(self, organisation_id: str, size: int) -> None:
        """An admitted request was answered: its room goes to the organisation's next ones."""
        left = self.inflight(organisation_id) - size
        if left > 0:
            self._inflight[organisation_id] = left
        else:
            self._inflight.pop(organisation_id, None)
        queue = self._waiting.get(organisation_id)
        while queue:
            size_next, granted = queue[0]
            if granted.done():  # cancelled while waiting
                queue.popleft()
                continue
            if not self._fits(organisation_id, size_next):
                break
            queue.popleft()
            self._inflight[organisation_id] = self.inflight(organisation_id) + size_next
            granted.set_result(None)
        if not queue:
            self._waiting.pop(organisation_id, None)
            if organisation_id not in self._inflight:
                self._caps.pop(organisation_id, None)

    def _fits(self, organisation_id: str, size: int) -> bool:
        used = self.inflight(organisation_id)
        if used == 0 or used + size <= self._caps[organisation_id]:
            return True
        return not self._shared(organisation_id)

    def _saw(self, organisation_id: str) -> None:
        now = self._clock()
        self._seen[organisation_id] = now
        if now - self._pruned_s >= SHARED_FOR_S / 10:  # forget the quiet ones, now and then
            self._pruned_s = now
            self._seen = {o: t for o, t in self._seen.items() if now - t < SHARED_FOR_S}

    def _shared(self, organisation_id: str) -> bool:
        """Whether another organisation published within :data:`SHARED_FOR_S`."""
        since = self._clock() - SHARED_FOR_S
        return any(o != organisation_id and t > since for o, t in self._seen.items())

    def _forget(self, organisation_id: str, granted: asyncio.Future[None]) -> None:
        queue = self._waiting.get(organisation_id)
        if queue is None:
            return
        kept = deque(item for item in queue if item[1] is not granted)
        if kept:
            self._waiting[organisation_id] = kept
        else:
            self._waiting.pop(organisation_id, None)


def request_bytes(content_length: bytes | None) -> int:
    """What a request counts against its organisation, from its ``Content-Length``."""
    if content_length is None:
        return UNKNOWN_LENGTH_BYTES
    try:
        return max(MIN_REQUEST_BYTES, int(content_length))
    except ValueError:
        return UNKNOWN_LENGTH_BYTES
