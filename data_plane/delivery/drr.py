"""Weighted deficit round robin across fairness keys, for one partition of a fair group (sans-IO).

Shreedhar and Varghese's DRR, as Fila schedules a queue: every fairness key with pending messages
is in a round; when a key's turn comes and its deficit is below one message, it gains
``quantum * weight``; it then sends messages, oldest first, while its deficit lasts; a key left
with nothing pending leaves the round and loses its deficit; one that spent its deficit goes to
the back. A key's weight is the group's ``weights[key]``, else the weight its oldest pending
message carries (set by an ``onEnqueue`` hook), else the group's ``defaultWeight``.

A pull plays the round for as many messages as it may lease. The state that must outlive it (each
key's deficit and place in the round) is read before and written after, under the partition's
row lock, so replicas take turns on one round. A key whose turn is refused by a throttle (its
oldest message has a throttle key without a token) sends nothing more in this pull, keeps its
deficit and goes to the back; offset order within a key is never broken.

The driver asks :meth:`Round.next_turn` for a key and the messages it may send now, checks their
throttle keys, and answers :meth:`Round.granted` with how many of them (a prefix) were admitted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import NamedTuple

SHARED_KEY = ""  # the key of messages published without one


class Pending(NamedTuple):
    """A message of the look-ahead window that has not been delivered yet (a tuple: a pull
    makes one per message of its window)."""

    offset: int
    key: str = SHARED_KEY
    weight: int = 0  # the message's own (0: none)
    throttle_keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Fairness:
    """A fair group's settings. ``enabled`` False: fairness was turned off, and the group is
    delivered in offset order until nothing it delivered out of order is left."""

    weights: Mapping[str, int] = field(default_factory=dict)
    default_weight: int = 1
    quantum: int = 1
    enabled: bool = True

    def weight_of(self, key: str, message_weight: int) -> int:
        """The key's weight: the group's for it, else its message's, else the default."""
        return self.weights.get(key) or message_weight or self.default_weight


@dataclass(frozen=True, slots=True)
class KeyState:
    """What outlives a pull: a key's deficit and its place in the round (lower turns first)."""

    deficit: int
    turn: int


IN_ORDER = Fairness(default_weight=1_000, quantum=1_000, enabled=False)


class Round:
    """One pull's share of a partition's round (see the module docstring)."""

    def __init__(
        self,
        pending: list[Pending],
        saved: Mapping[str, KeyState],
        fairness: Fairness,
        budget: int,
    ) -> None:
        if not fairness.enabled:  # every message under one key: offset order
            pending = [Pending(p.offset, SHARED_KEY, 0, p.throttle_keys) for p in pending]
            saved = {}
        self._queues: dict[str, deque[Pending]] = {}
        for item in pending:
            self._queues.setdefault(item.key, deque()).append(item)
        known = sorted((k for k in self._queues if k in saved), key=lambda k: saved[k].turn)
        fresh = [k for k in self._queues if k not in saved]  # in order of their oldest message
        self._ring: deque[str] = deque(known + fresh)
        self._deficits = {k: saved[k].deficit for k in known}
        self._fairness = fairness
        self._budget = budget
        self._blocked: set[str] = set()
        self._turn: tuple[str, int] | None = None
        self.picked: list[Pending] = []  # in delivery order

    def next_turn(self) -> tuple[str, list[Pending]] | None:
        """The next key with the messages it may send now, or None when the pull is done."""
        while self._budget > 0 and len(self._blocked) < len(self._ring):
            key = self._ring[0]
            if key in self._blocked:
                self._ring.rotate(-1)
                continue
            queue = self._queues[key]
            deficit = self._deficits.get(key, 0)
            if deficit < 1:
                weight = self._fairness.weight_of(key, queue[0].weight)
                deficit = self._deficits[key] = deficit + self._fairness.quantum * weight
            count = min(deficit, len(queue), self._budget)
            self._turn = (key, count)
            return key, list(islice(queue, count))
        return None

    def granted(self, count: int) -> None:
        """``count`` messages of the last turn's (its first ones) were admitted."""
        assert self._turn is not None, "granted() answers next_turn()"
        key, offered = self._turn
        self._turn = None
        queue = self._queues[key]
        self.picked += [queue.popleft() for _ in range(count)]
        self._deficits[key] -= count
        self._budget -= count
        if not queue:  # nothing left pending: the key leaves the round and its deficit goes
            self._ring.popleft()
            del self._deficits[key]
        elif count < offered:  # throttled: nothing more from it in this pull
            self._blocked.add(key)
            self._ring.rotate(-1)
        elif self._deficits[key] < 1:
            self._ring.rotate(-1)
        # else the budget ran out mid-turn: the key keeps its place and what is left of its deficit

    def state(self) -> dict[str, KeyState]:
        """Each key still in the round: its deficit and place, to be saved."""
        return {
            key: KeyState(self._deficits.get(key, 0), turn) for turn, key in enumerate(self._ring)
        }

    def pending_by_key(self) -> dict[str, int]:
        """How many messages each key still has pending in the window."""
        return {key: len(queue) for key, queue in self._queues.items() if queue}


def play(
    pending: list[Pending], saved: Mapping[str, KeyState], fairness: Fairness, budget: int
) -> Round:
    """A round played with no throttle: every turn admitted whole."""
    round_ = Round(pending, saved, fairness, budget)
    while (turn := round_.next_turn()) is not None:
        round_.granted(len(turn[1]))
    return round_
