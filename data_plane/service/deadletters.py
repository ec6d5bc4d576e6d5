"""Dead letters through the door: a group's queue (inspect, replay one, replay all) and the
environment's alert webhook endpoint."""

from __future__ import annotations

from core.db import AsyncPool
from core.settings import WebhookSettings
from data_plane.deadletters import alerts
from data_plane.deadletters import service as queue
from data_plane.deadletters.alerts import AlertEndpoint
from data_plane.deadletters.service import DeadLetterPage, Replayed
from data_plane.service.scope import Caller, in_group


class DeadLetters:
    """The dead-letter queues of the caller's groups and the alerts they raise. A replay wakes
    the group's waiting consumers through the notification it commits."""

    def __init__(self, db: AsyncPool, webhooks: WebhookSettings) -> None:
        self._db = db
        self._webhooks = webhooks

    async def inspect(
        self, caller: Caller, topic: str, group: str, limit: int, after: str | None = None
    ) -> DeadLetterPage:
        """Up to ``limit`` dead letters after the one named ``after``, oldest first, and the
        queue's depth."""
        async with in_group(self._db, caller, topic, group) as (conn, ref):
            return await queue.inspect(conn, ref, limit, after)

    async def replay_one(self, caller: Caller, topic: str, group: str, message_id: str) -> Replayed:
        """Deliver one dead letter again, as attempt 1 (409 if it was replayed already)."""
        async with in_group(self._db, caller, topic, group) as (conn, ref):
            return await queue.replay_one(conn, ref, message_id)

    async def replay_all(
        self, caller: Caller, topic: str, group: str, count: int | None = None
    ) -> Replayed:
        """Deliver the group's dead letters again, oldest first: all, or at most ``count``."""
        async with in_group(self._db, caller, topic, group) as (conn, ref):
            return await queue.replay_all(conn, ref, count)

    async def alert_endpoint(self, caller: Caller) -> AlertEndpoint:
        """Where the environment's alerts go (its secret as a hint only), or 404
        ``ALERT_ENDPOINT_NOT_FOUND``."""
        async with self._db.connection() as conn:
            return await alerts.get_endpoint(conn, caller.environment_id)

    async def set_alert_endpoint(
        self, caller: Caller, url: str, *, rotate_secret: bool = False
    ) -> AlertEndpoint:
        """Create or change the endpoint; a new signing secret (in the result only) when it is
        created or ``rotate_secret`` asks for one."""
        async with self._db.connection() as conn:
            return await alerts.put_endpoint(
                conn,
                caller.environment_id,
                url,
                rotate_secret=rotate_secret,
                allow_private=self._webhooks.allow_private,
            )

    async def rotate_alert_secret(self, caller: Caller) -> AlertEndpoint:
        """A new signing secret (in the result only); the old one stops signing at once."""
        async with self._db.connection() as conn:
            return await alerts.rotate_secret(
                conn, caller.environment_id, allow_private=self._webhooks.allow_private
            )

    async def delete_alert_endpoint(self, caller: Caller) -> None:
        """Alerts are still raised and re-armed, but none is sent."""
        async with self._db.connection() as conn:
            await alerts.delete_endpoint(conn, caller.environment_id)
