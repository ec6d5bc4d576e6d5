"""Latency triage of deliveries: pulls slower than ``QUEUECORE_TRIAGE_SLOW_MS``, and why.

A pull's execution (not its wait for messages: a long-poll that waits is not slow) is split into
``acquire`` (waiting for a pooled PostgreSQL connection), ``lease`` (the statement that leases
the offsets and commits), ``read`` (reading the leased messages: the block cache, else S3) and
``other`` (the rest: a pull with redeliveries due runs as one transaction and is not split).
Each record is one ``slow_delivery`` log line and, with the GreptimeDB series writer on, one row
of ``queuecore_slow_deliveries``, under the same per-second bound as slow publishes
(``data_plane.write.triage``), with which it shares its settings.
"""

from __future__ import annotations

from data_plane.delivery.model import GroupRef, Pulled
from data_plane.write.triage import SlowPublishTriage
from observability.series_rows import SLOW_DELIVERIES

TABLE = SLOW_DELIVERIES
PHASES = ("acquire", "lease", "read", "other")


class SlowDeliveryTriage(SlowPublishTriage):
    """Records pulls slower than a threshold, at most ``max_per_s`` a second."""

    def observe_pull(
        self,
        environment_id: str,
        ref: GroupRef,
        member_id: str,
        pulled: Pulled,
        acquire_s: float,
        total_s: float,
        now_s: float,
    ) -> None:
        """Record the pull if it was slow and the per-second budget allows."""
        if total_s < self.slow_s or not self._admit(now_s):
            return
        other_s = max(0.0, total_s - acquire_s - pulled.lease_s - pulled.read_s)
        spans = (acquire_s, pulled.lease_s, pulled.read_s, other_s)
        phases_ms = {name: round(s * 1000, 3) for name, s in zip(PHASES, spans, strict=True)}
        tags = {
            "environment": environment_id,
            "topic": ref.topic,
            "group": ref.name,
            "member": member_id,
            "cause": max(phases_ms, key=phases_ms.__getitem__),
        }
        fields: dict[str, float] = {
            "total_ms": round(total_s * 1000, 3),
            **{f"{name}_ms": value for name, value in phases_ms.items()},
            "messages": len(pulled.deliveries),
        }
        self._record("slow_delivery", TABLE, tags, fields)
