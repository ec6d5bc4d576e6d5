"""What a consumer holds: flow control, and keeping the leases of what it holds.

A message is held from its arrival until it is acked or nacked (or dropped): buffered, in a
handler, or in the hands of an iterating caller. The consumer asks the server for no more than
fits: the member's window (``max_messages``) is the server's bound, and ``max_bytes`` is kept by
narrowing that window while the held messages are too large.

Leases. A message arrives leased for the group's ack timeout. While it is held, the keeper
extends it before it expires (by the ack timeout, at least 10 s), in one request for all that
are due (after the acks queued before), up to ``max_lease_extension`` after its arrival. On an exactly-once topic a message whose
lease ended (an extension refused, or its deadline passed) is never handed out, and its ack or
nack is not sent: the server would refuse it, and the message is delivered again anyway.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Iterable
from typing import TYPE_CHECKING, Callable

from queuecore._settle import Report, Settler
from queuecore.errors import QueueCoreError

if TYPE_CHECKING:
    from queuecore.messages import AsyncMessage

SAFETY_S = 0.25  # a lease this close to its end counts as ended (the ack would arrive late)
MIN_TICK_S = 0.05
MAX_TICK_S = 5.0
MIN_EXTENSION_S = 10

LostReport = Callable[[int, str], Awaitable[None]]
SetWindow = Callable[[int], Awaitable[None]]


class Holdings:
    """The messages a consumer holds, their size, and their leases."""

    def __init__(
        self,
        window: int,
        max_bytes: int,
        max_extension_s: float,
        settler: Settler,
        lost: LostReport,
        set_window: SetWindow,
        report: Report,
    ) -> None:
        self.window, self.max_bytes, self.max_extension_s = window, max_bytes, max_extension_s
        self.ack_timeout_s = 30.0
        self.exactly_once = True
        self._settler, self._lost, self._set_window = settler, lost, set_window
        self._report = report
        self._held: dict[str, AsyncMessage] = {}
        self._bytes = 0
        self.room = asyncio.Event()
        self.room.set()
        self._narrowed = False
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._held)

    @property
    def free(self) -> int:
        """Messages that still fit (0 while the bytes are over their bound)."""
        return 0 if self._bytes >= self.max_bytes else max(self.window - len(self._held), 0)

    def add(self, message: AsyncMessage, size: int) -> None:
        """A message arrived: held, leased for the ack timeout from now."""
        now = time.monotonic()
        message._size, message._arrived, message._deadline = size, now, now + self.ack_timeout_s
        self._held[message.ack_id] = message
        self._bytes += size
        self._changed()

    def release(self, message: AsyncMessage) -> None:
        """A message settled or dropped: no longer held or kept."""
        if self._held.pop(message.ack_id, None) is message:
            self._bytes -= message._size
            self._changed()

    def release_all(self) -> None:
        """Forget everything held (the member is gone: its leases ended)."""
        for message in list(self._held.values()):
            message._lost = True
            self.release(message)

    def usable(self, message: AsyncMessage) -> bool:
        """Whether ``message`` may still be handed out or settled."""
        if message._lost:
            return False
        return not self.exactly_once or time.monotonic() < message._deadline - SAFETY_S

    def _changed(self) -> None:
        if self.free > 0:
            self.room.set()
        else:
            self.room.clear()
        over = self._bytes >= self.max_bytes
        if over != self._narrowed:  # bytes bound: the server's window follows what is held
            self._narrowed = over
            self._spawn(self._set_window(max(len(self._held), 1) if over else self.window))

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- the keeper ----------------------------------------------------------------------------

    async def keep(self, stopping: asyncio.Event) -> None:
        """Extend the leases of held messages before they end, until ``stopping``."""
        while not stopping.is_set():
            tick = min(max(self.ack_timeout_s / 4, MIN_TICK_S), MAX_TICK_S)
            try:
                await asyncio.wait_for(stopping.wait(), tick)
                return
            except asyncio.TimeoutError:
                pass
            try:
                await self.extend_due()
            except QueueCoreError as exc:  # the next tick tries again
                await self._report(exc)

    @property
    def extension_s(self) -> int:
        """How long each extension leases a held message: the ack timeout, at least 10 s.

        At least 10 s (as Google Pub/Sub's clients) so that a short ack timeout does not make the
        keeper race the clock on a busy machine; a consumer that dies holds them that long."""
        return max(math.ceil(self.ack_timeout_s), MIN_EXTENSION_S)

    async def extend_due(self) -> None:
        """One extension request for every held message whose lease ends soon: within half an
        extension (so a message leased for a short ack timeout is extended at its first look)."""
        now = time.monotonic()
        horizon = now + max(self.ack_timeout_s * 3 / 4, self.extension_s / 2)
        due, ended = [], []
        for message in list(self._held.values()):
            if message._lost or message._deadline > horizon:
                continue
            if now - message._arrived >= self.max_extension_s or message._deadline <= now:
                ended.append(message)
            else:
                due.append(message)
        if ended and self.exactly_once:
            await self._lose(ended, "its lease ended before it was settled")
        by_length: dict[int, list[AsyncMessage]] = {}
        for message in due:  # never leased past its arrival + max_lease_extension
            left = message._arrived + self.max_extension_s - now
            by_length.setdefault(min(self.extension_s, max(1, math.ceil(left))), []).append(message)
        for seconds, messages in by_length.items():
            await self.extend(messages, seconds)

    async def extend(self, messages: Iterable[AsyncMessage], seconds: int) -> list[str]:
        """Extend these leases by ``seconds`` from now; the ack ids extended."""
        chosen = [m for m in messages if not m._lost]
        if not chosen:
            return []
        await self._settler.flush()  # the acks queued before go first: no split range leases
        sent_at = time.monotonic()
        extended = await self._settler.extend([m.ack_id for m in chosen], seconds)
        granted = set(extended)
        for message in chosen:
            if message.ack_id in granted:
                message._deadline = sent_at + seconds
        refused = [m for m in chosen if m.ack_id not in granted and m.ack_id in self._held]
        if refused and self.exactly_once:
            await self._lose(refused, "the server refused to extend its lease")
        return extended

    async def _lose(self, messages: list[AsyncMessage], why: str) -> None:
        """Leases that ended: the server no longer counts these messages, nor does the window."""
        for message in messages:
            message._lost = True
            self.release(message)
        await self._lost(len(messages), why)
