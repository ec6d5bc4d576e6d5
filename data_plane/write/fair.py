"""Fair shares between organisations in the segment writer: weighted deficit round robin.

Publishes wait in one queue per organisation. A flush takes up to ``budget`` bytes by deficit
round robin over the organisations with work waiting: each round adds ``quantum * weight`` bytes
to an organisation's deficit, and it contributes publishes, oldest first, while they fit in its
deficit (weights come from the tier, :func:`tenants.tiers.tier_weight`). An organisation whose publishes
already in flight (taken by flushes not yet answered) reach ``inflight_cap`` bytes contributes
nothing until one of those flushes ends, so a flood waits behind its own backlog while another
organisation's publish goes in the next flush. An organisation with nothing in flight may always
send one publish, however big, so a batch above the cap is never stuck.

This is the replica's share between organisations; the fairness between keys inside a consumer
group's delivery is another, separate scheduler.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar

QUANTUM_BYTES = 64 * 1024  # bytes per round for weight 1: a few batches, many single messages


class Queued(Protocol):
    """What the queue needs to know of a waiting publish."""

    @property
    def owner(self) -> str:
        """The organisation it belongs to."""

    @property
    def weight(self) -> int:
        """Its organisation's weight."""

    @property
    def size_bytes(self) -> int:
        """Its approximate encoded size."""


P = TypeVar("P", bound=Queued)


class FairQueue(Generic[P]):
    """Publishes waiting for a flush, per organisation, taken by weighted deficit round robin."""

    def __init__(self, inflight_cap: int, max_flushes: int) -> None:
        self.inflight_cap = inflight_cap  # bytes of one organisation in flushes in flight
        self.max_flushes = max_flushes  # flushes in flight one organisation may be part of
        self.bytes = 0  # waiting, all organisations
        self._queues: dict[str, deque[P]] = {}
        self._ring: deque[str] = deque()  # organisations with work waiting, next served first
        self._deficit: dict[str, int] = {}
        self._waiting: dict[str, int] = {}  # bytes waiting, per organisation
        self._inflight: dict[str, int] = {}  # bytes taken by flushes not yet ended
        self._flushes: dict[str, int] = {}  # flushes not yet ended that took some of its work

    def __bool__(self) -> bool:
        return bool(self._ring)

    def __iter__(self) -> Iterator[P]:
        for queue in self._queues.values():
            yield from queue

    def add(self, publish: P) -> None:
        """Queue ``publish`` behind its organisation's earlier ones."""
        owner = publish.owner
        queue = self._queues.get(owner)
        if queue is None:
            queue = self._queues[owner] = deque()
            self._ring.append(owner)
            self._deficit[owner] = 0
        queue.append(publish)
        self.bytes += publish.size_bytes
        self._waiting[owner] = self._waiting.get(owner, 0) + publish.size_bytes

    def remove(self, publish: P) -> bool:
        """Take ``publish`` out if it is still waiting; whether it was."""
        queue = self._queues.get(publish.owner)
        if queue is None or not any(waiting is publish for waiting in queue):
            return False
        kept = deque(waiting for waiting in queue if waiting is not publish)
        self.bytes -= publish.size_bytes
        self._waiting[publish.owner] -= publish.size_bytes
        if kept:
            self._queues[publish.owner] = kept
        else:
            self._drop(publish.owner)
        return True

    def ready(self) -> bool:
        """Whether a flush could take something now (some organisation is under its caps)."""
        return any(self._may_send(owner) for owner in self._ring)

    def ready_bytes(self) -> int:
        """Bytes waiting from organisations under their caps."""
        return sum(self._waiting[owner] for owner in self._ring if self._may_send(owner))

    def idle(self, owner: str) -> bool:
        """Whether the organisation has nothing in flushes in flight."""
        return owner not in self._inflight

    def newcomer_ready(self) -> bool:
        """Whether an organisation with nothing in flight has work waiting."""
        return any(owner not in self._inflight and self._may_send(owner) for owner in self._ring)

    def take(self, budget: int, newcomers_only: bool = False) -> list[P]:
        """Publishes for one flush, up to ``budget`` bytes (at least one when any is ready);
        ``newcomers_only``: only of organisations that had nothing in flight."""
        taken: list[P] = []
        size = 0
        full: set[str] = set()  # its next publish does not fit in this flush
        if newcomers_only:  # the others count as full: this flush is not theirs
            full = {owner for owner in self._ring if owner in self._inflight}
        senders: set[str] = set()
        while size < budget:
            eligible = [o for o in self._ring if o not in full and self._may_send(o)]
            if not eligible:
                break
            for _ in range(len(self._ring)):
                owner = self._ring[0]
                self._ring.rotate(-1)  # visited: the next visit (or flush) starts after it
                if owner in full or not self._may_send(owner):
                    continue
                queue = self._queues[owner]
                self._deficit[owner] += QUANTUM_BYTES * queue[0].weight
                while queue and (need := queue[0].size_bytes) <= self._deficit[owner]:
                    if taken and size + need > budget:
                        full.add(owner)
                        break
                    taken.append(queue.popleft())
                    self._deficit[owner] -= need
                    self._waiting[owner] -= need
                    self._inflight[owner] = self._inflight.get(owner, 0) + need
                    size += need
                    if owner not in senders:
                        senders.add(owner)
                        self._flushes[owner] = self._flushes.get(owner, 0) + 1
                    if self._inflight[owner] >= self.inflight_cap:
                        break
                if not queue:
                    self._drop(owner)
                if size >= budget:
                    break
        self.bytes -= size
        return taken

    def done(self, publishes: list[P]) -> None:
        """Their flush ended: their bytes no longer count against their organisations' caps."""
        for owner in {publish.owner for publish in publishes}:
            left = self._flushes.get(owner, 0) - 1
            if left > 0:
                self._flushes[owner] = left
            else:
                self._flushes.pop(owner, None)
        for publish in publishes:
            left = self._inflight.get(publish.owner, 0) - publish.size_bytes
            if left > 0:
                self._inflight[publish.owner] = left
            else:
                self._inflight.pop(publish.owner, None)

    def _may_send(self, owner: str) -> bool:
        if self._flushes.get(owner, 0) >= self.max_flushes:
            return False  # a flush slot stays free for the others
        return self._inflight.get(owner, 0) < self.inflight_cap

    def _drop(self, owner: str) -> None:
        del self._queues[owner]
        del self._deficit[owner]  # an idle organisation keeps no credit (DRR)
        del self._waiting[owner]
        self._ring.remove(owner)
