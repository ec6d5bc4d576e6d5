"""Waiting for messages: how long a long-poll or a stream sleeps between pulls, and a stream's
sequence of pulls."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from datetime import UTC, datetime

from data_plane.delivery import Pulled
from data_plane.groups.service import HEARTBEAT_DIVISOR
from data_plane.read.notify import PublishListener, Watch

KEEPALIVE_S = 15.0  # an idle stream hears from the server at least this often

PullAgain = Callable[[Pulled], Awaitable[Pulled]]


def wait_s(pulled: Pulled, budget_s: float) -> float:
    """Until the next lease expiry or due retry of the member's partitions, within the budget.

    And within a heartbeat interval of the member's session: each pull counts as a heartbeat,
    so a consumer waiting on an open stream or long-poll is never evicted as silent.
    """
    budget_s = min(budget_s, pulled.session_timeout_ms / 1000 / HEARTBEAT_DIVISOR)
    if pulled.wakeup is None:
        return budget_s
    return min(budget_s, max((pulled.wakeup - datetime.now(UTC)).total_seconds(), 0) + 0.01)


class Stream:
    """A member's deliveries as they become available, one :class:`Pulled` per pull.

    The first is the pull made when the stream opened; then a pull whenever a notification
    concerns the member's partitions, a lease expires or a retry falls due, or at the latest
    every :data:`KEEPALIVE_S` (an empty one, when idle). It registers for its partitions'
    notifications before each pull and sleeps on that registration only after a short pull, so
    a publish is delivered as soon as its NOTIFY arrives: no polling, no lost wake-up. It ends
    when the server stops (after handing over what it pulled), or when a newer stream of the
    same member opens in this process (:meth:`replace`): a connection its client abandoned
    without closing must not go on leasing the member's messages beside the new one.
    """

    def __init__(
        self,
        first: Pulled,
        pull_again: PullAgain,
        listener: PublishListener,
        stopping: Callable[[], bool],
        batch: int,
        member_id: str = "",
        on_end: Callable[[Stream], None] = lambda stream: None,
    ) -> None:
        self.first = first
        self.member_id = member_id
        self._on_end = on_end
        self._pull_again = pull_again
        self._listener = listener
        self._stopping = stopping
        self._batch = batch
        self.replaced = False
        self._watch: Watch | None = None

    def replace(self) -> None:
        """Stop pulling: a newer stream serves the member (a pull under way still completes)."""
        self.replaced = True
        if self._watch is not None:
            self._watch.event.set()

    def _over(self) -> bool:
        return self.replaced or self._stopping()

    async def batches(self) -> AsyncGenerator[Pulled, None]:
        """The pulls, first one first; close it (``aclose``) to stop early."""
        pulled, look_again = self.first, True  # registered after the first pull: look once more
        try:
            with self._listener.watch(pulled.ref.topic_id, pulled.partitions) as watch:
                self._watch = watch
                watch.full = pulled.full
                while True:
                    yield pulled
                    if self._over():
                        return
                    if not look_again and len(pulled.deliveries) < self._batch:
                        await watch.wait(wait_s(pulled, KEEPALIVE_S))
                        if self._over():
                            return
                    look_again = False
                    watch.event.clear()
                    pulled = await self._pull_again(pulled)
                    watch.partitions, watch.full = pulled.partitions, pulled.full
        finally:
            self._on_end(self)
