"""Delivery to consumer-group members: leases, acks, nacks with backoff, dead letters, offsets.

A member receives messages only from partitions it owns, in offset order per partition, at most
``maxInFlight`` unacknowledged at a time. Each delivery is a lease with its own ``ackId``; when
it expires or is nacked the message is delivered again with ``attempt + 1`` (a new ``ackId``),
to whichever member owns the partition then. On an exactly-once topic only the current,
unexpired lease can be acked; on an at-least-once topic a late ack is accepted until the
message is delivered again. The committed offset is the lowest offset not yet done (acked or
dead-lettered); it only moves forward, except by an explicit seek or reset.

Bookkeeping is per request, not per message (docs/consumer-groups.md): fresh offsets are leased
as ONE range row per partition and pull (``group_leases``, see :mod:`data_plane.delivery.leases`); acks
flip bits of those rows, set-based. Only what leaves a range — a nack, a partial extend, an
expiry — gets a per-message ``group_deliveries`` row, and the per-message rules (redelivery,
backoff, dead letters, stale-ack refusal) take over from there.
"""

from data_plane.delivery.acks import ack, backoff_ms, extend, fail_in_place, nack, nack_many
from data_plane.delivery.fair import pull
from data_plane.delivery.model import (
    AckOutcome,
    AckRejected,
    Conn,
    Delivery,
    GroupRef,
    GroupRefCache,
    Pulled,
    group_ref,
)
from data_plane.delivery.offsets import offsets, reset, seek
from data_plane.delivery.store import wake

__all__ = [
    "AckOutcome",
    "AckRejected",
    "Conn",
    "Delivery",
    "GroupRef",
    "GroupRefCache",
    "Pulled",
    "ack",
    "backoff_ms",
    "extend",
    "fail_in_place",
    "group_ref",
    "nack",
    "nack_many",
    "offsets",
    "pull",
    "reset",
    "seek",
    "wake",
]
