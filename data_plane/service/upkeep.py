"""The data plane's background work through the door, as Celery tasks run it.

Each call runs on a connection of its own from ``db``, in a worker a fresh autocommit one
(``core.db.Connector``): the work commits step by step (before touching S3; group by group), and
a worker runs every task in a new event loop, where a pool of the last one would be of no use. Every call is idempotent and safe on several
workers at once (row locks serialise them).
"""

from __future__ import annotations

from core.db import Database
from core.object_store import ObjectStore
from core.settings import WebhookSettings
from data_plane.deadletters import alerts, webhooks
from data_plane.deadletters.alerts import CheckReport
from data_plane.deadletters.webhooks import Outcome
from data_plane.delivery import store
from data_plane.groups import lag
from data_plane.groups import service as groups
from data_plane.groups.lag import PurgeReport
from data_plane.groups.service import SweepReport
from data_plane.maintenance import cleanup
from data_plane.maintenance.cleanup import CleanupReport

SETTLED_ACK_GRACE_S = store.SETTLED_ACK_GRACE_S
SNAPSHOT_KEEP_S = lag.SNAPSHOT_KEEP_S
LAG_BUCKET_S = lag.BUCKET_S  # the lag series' bucket, as the analytics job writes it


class Upkeep:
    """Retention, garbage collection, topic deletion, member eviction, ack tombstones, DLQ
    alerts and their webhooks, lag snapshots."""

    def __init__(self, db: Database, objects: ObjectStore, webhooks: WebhookSettings) -> None:
        self._db = db
        self._objects = objects
        self._webhooks = webhooks

    async def delete_topic_data(self, topic_id: str | None = None) -> CleanupReport:
        """Remove deleted topics' (or one's) index rows, partitions, keys, rows and objects."""
        async with self._db.connection() as conn:
            return await cleanup.delete_topic_data(conn, self._objects, topic_id)

    async def collect_orphans(self, grace_s: int) -> CleanupReport:
        """Delete segment objects never committed or no longer referenced, older than the grace."""
        async with self._db.connection() as conn:
            return await cleanup.collect_orphans(conn, self._objects, grace_s)

    async def apply_retention(self) -> CleanupReport:
        """Drop messages past their topic's retention and the objects left unreferenced."""
        async with self._db.connection() as conn:
            return await cleanup.apply_retention(conn, self._objects)

    async def sweep_groups(self, topic_id: str | None = None) -> SweepReport:
        """Evict silent members and assign partitions added to topics, in every group."""
        async with self._db.connection() as conn:
            return await groups.sweep_groups(conn, topic_id)

    async def purge_settled_acks(self, grace_s: float = SETTLED_ACK_GRACE_S) -> int:
        """Delete the tombstones of acks settled more than ``grace_s`` ago; how many."""
        async with self._db.connection() as conn:
            return await store.purge_settled_acks(conn, grace_s)

    async def check_dlq_alerts(self, group_id: str | None = None) -> CheckReport:
        """Raise the alert of groups whose DLQ depth reached the threshold, re-arm the others;
        the webhook deliveries to send are in the report."""
        async with self._db.connection() as conn:
            return await alerts.check_groups(conn, group_id)

    async def deliver_webhook(self, delivery_id: str) -> Outcome:
        """POST one outbox delivery; the outcome says whether and when to try again."""
        async with self._db.connection() as conn:
            return await webhooks.deliver(conn, delivery_id, self._webhooks)

    async def snapshot_lag(self, topic_id: str | None = None) -> int:
        """Record this minute's lag of every group and partition; rows recorded."""
        async with self._db.connection() as conn:
            return await lag.take_snapshots(conn, topic_id=topic_id)

    async def purge_lag_snapshots(self, keep_s: float = SNAPSHOT_KEEP_S) -> PurgeReport:
        """Delete lag snapshots and series points older than ``keep_s``."""
        async with self._db.connection() as conn:
            return await lag.purge_snapshots(conn, keep_s)
