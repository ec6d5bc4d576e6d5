"""Range leases, sans-IO: the ack ids of a range and the bitmaps of what is done in it.

A pull that takes fresh offsets ``first..last`` of a partition records ONE ``group_leases`` row.
The ackId of each of its offsets is ``ack_`` + the lease id (16 base62 characters) + the offset's
distance from ``first`` (3 base62 characters), so the ids of an ack request group by lease
without a lookup per message. (Per-message ackIds, of redeliveries, are ``ack_`` + 24 characters:
the two never have the same length.)

The row's ``acked`` and ``done`` bitmaps (PostgreSQL ``varbit``; bit ``i`` from the left is
offset ``first + i``) say which offsets were acked through this lease, and which are settled
here or were handed over to a per-message ``group_deliveries`` row (nack, partial extend, expiry).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tenants.ids import BASE62, random_base62

ACK_PREFIX = "ack_"
LEASE_ID_CHARS = 16
DELTA_CHARS = 3
MAX_RANGE = 62**DELTA_CHARS
RANGE_ACK_CHARS = len(ACK_PREFIX) + LEASE_ID_CHARS + DELTA_CHARS
_deltas: list[str] = []  # memo of the 3-character suffixes, grown on demand
_delta_of: dict[str, int] = {}  # and back


def new_lease_id() -> str:
    """A random lease id (16 base62 characters, ~95 bits)."""
    return random_base62(LEASE_ID_CHARS)


def _delta_code(delta: int) -> str:
    return BASE62[delta // 3844] + BASE62[delta // 62 % 62] + BASE62[delta % 62]


def range_ack_ids(lease_id: str, count: int) -> list[str]:
    """The ackIds of the ``count`` offsets of a lease, in offset order."""
    if not 0 < count <= MAX_RANGE:
        raise ValueError(f"a range lease holds 1..{MAX_RANGE} offsets, not {count}")
    _grow(count)
    prefix = ACK_PREFIX + lease_id
    return [prefix + code for code in _deltas[:count]]


def _grow(count: int) -> None:
    for delta in range(len(_deltas), count):
        _deltas.append(_delta_code(delta))
        _delta_of[_deltas[-1]] = delta


def parse_range_ack(ack_id: str) -> tuple[str, int] | None:
    """``(lease_id, delta)`` of a range ackId, or None for any other string."""
    if len(ack_id) != RANGE_ACK_CHARS or not ack_id.startswith(ACK_PREFIX):
        return None
    delta = _delta_of.get(ack_id[-DELTA_CHARS:])
    if delta is None:
        delta = _slow_delta(ack_id[-DELTA_CHARS:])
        if delta is None:
            return None
    return ack_id[len(ACK_PREFIX) : -DELTA_CHARS], delta


def group_by_lease(ack_ids: Iterable[str]) -> tuple[dict[str, list[tuple[str, int]]], list[str]]:
    """Range ackIds grouped by lease id, with their offset's distance; and all other ids.

    The hot loop of an ack request (one pass, no call per id for ids this process issued).
    """
    ranged: dict[str, list[tuple[str, int]]] = {}
    plain: list[str] = []
    for ack_id in ack_ids:
        delta = _delta_of.get(ack_id[-DELTA_CHARS:])
        if delta is None or len(ack_id) != RANGE_ACK_CHARS or ack_id[:4] != ACK_PREFIX:
            parsed = parse_range_ack(ack_id)
            if parsed is None:
                plain.append(ack_id)
                continue
            lease_id, delta = parsed
        else:
            lease_id = ack_id[4:-DELTA_CHARS]
        bucket = ranged.get(lease_id)
        if bucket is None:
            ranged[lease_id] = [(ack_id, delta)]
        else:
            bucket.append((ack_id, delta))
    return ranged, plain


def _slow_delta(code: str) -> int | None:
    """A suffix this process has not issued (another replica's, or garbage)."""
    if any(ch not in BASE62 for ch in code):
        return None
    return BASE62.index(code[0]) * 3844 + BASE62.index(code[1]) * 62 + BASE62.index(code[2])


def named_bits(deltas: Iterable[int]) -> str:
    """A ``varbit`` literal with bit ``d`` (from the left) set for each delta, as long as the
    highest one needs: the offsets of a lease that an ack names (``qc_ack_ranges`` pads it)."""
    deltas = list(deltas)
    bits = bytearray(b"0" * (max(deltas) + 1))
    for delta in deltas:
        bits[delta] = 49  # "1"
    return bits.decode()


@dataclass(frozen=True, slots=True)
class RangeBits:
    """Which offsets of a range are acked, and which are done (acked or handed over)."""

    size: int
    acked: int
    done: int

    @classmethod
    def from_text(cls, acked: str, done: str) -> RangeBits:
        """From PostgreSQL's text form of the two ``varbit`` columns."""
        return cls(len(done), int(acked or "0", 2), int(done or "0", 2))

    def _bit(self, delta: int) -> int:
        return 1 << (self.size - 1 - delta)

    def is_acked(self, delta: int) -> bool:
        """Acked through this lease."""
        return bool(self.acked & self._bit(delta))

    def is_done(self, delta: int) -> bool:
        """Acked here, or no longer this lease's business."""
        return bool(self.done & self._bit(delta))

    def mask(self, deltas: Iterable[int]) -> int:
        """The bits of these offsets."""
        bits = bytearray(b"0" * self.size)
        for delta in deltas:
            bits[delta] = 49  # "1"
        return int(bits, 2)

    def with_acked(self, deltas: Iterable[int]) -> RangeBits:
        """These offsets acked (and so done)."""
        mask = self.mask(deltas)
        return RangeBits(self.size, self.acked | mask, self.done | mask)

    def with_handed_over(self, deltas: Iterable[int]) -> RangeBits:
        """These offsets done here without an ack: a per-message row now speaks for them."""
        return RangeBits(self.size, self.acked, self.done | self.mask(deltas))

    def open_deltas(self) -> list[int]:
        """Offsets (as distances from the first) not done yet, in order."""
        return [d for d in range(self.size) if not self.done & self._bit(d)]

    @property
    def open_count(self) -> int:
        """How many offsets are not done yet."""
        return self.size - self.done.bit_count()

    @property
    def acked_text(self) -> str:
        """``acked`` as a ``varbit`` literal."""
        return format(self.acked, f"0{self.size}b")

    @property
    def done_text(self) -> str:
        """``done`` as a ``varbit`` literal."""
        return format(self.done, f"0{self.size}b")
