"""Push groups through the door: what the console shows of one (recent failures, a test push),
and what the pushers do beside the pulls, acks and extends every member does (``DataPlane``):
find the groups to push, join them, count failed attempts, nack with an endpoint's delay."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from core.db import AsyncPool
from core.sealed import Sealer
from data_plane import delivery
from data_plane.delivery import GroupRef
from data_plane.groups import service as groups
from data_plane.hooks.failure import FailureHook
from data_plane.push import config, failures
from data_plane.push.config import PushTarget
from data_plane.push.failures import PushFailure
from data_plane.push.sender import TEST_EVENT, PushBody, PushOutcome, PushSender
from data_plane.read.notify import PublishListener
from data_plane.read.reader import SegmentReader
from data_plane.read.schemas import iso_timestamp
from data_plane.service.scope import Caller, in_group
from tenants.ids import new_id

TEST_TIMEOUT_S = 10.0  # a console request waits at most this long for the endpoint


@dataclass(frozen=True, slots=True)
class Pusher:
    """A pusher's membership of one push group."""

    member_id: str
    window: int  # the member's window in force


class Push:
    """The push side of consumer groups (docs/push.md)."""

    def __init__(
        self,
        db: AsyncPool,
        reader: SegmentReader,
        listener: PublishListener,
        sealer: Sealer,
        allow_private: bool,
        failure_hook: Callable[[GroupRef], FailureHook | None] = lambda ref: None,
    ) -> None:
        self._db = db
        self._failure_hook = failure_hook  # the group's onFailure hook decides a failed push too
        self._reader = reader
        self._listener = listener
        self._sealer = sealer
        self.allow_private = allow_private

    # --- the console ---------------------------------------------------------------------------

    async def failures(
        self, caller: Caller, topic: str, group: str, limit: int = 20
    ) -> list[PushFailure]:
        """The group's recent failed pushes, newest first."""
        async with in_group(self._db, caller, topic, group) as (conn, ref):
            return await failures.recent(conn, ref.id, limit)

    async def test(self, caller: Caller, topic: str, group: str) -> PushOutcome:
        """POST a ``push.test`` event, signed with the group's secret, to its endpoint now."""
        async with in_group(self._db, caller, topic, group) as (conn, _):  # 404 when there is none
            found = await config.target(conn, caller.environment_id, topic, group, self._sealer)
        if found is None:
            raise groups.NotAPushGroup(group)
        body = msgspec.json.encode(_test_body(found))
        sender = PushSender(self.allow_private, max_connections=1)
        try:
            timeout_s = min(found.settings.timeout_ms / 1000, TEST_TIMEOUT_S)
            return await sender.post(
                found.settings.endpoint, found.secret, new_id("psh"), body, timeout_s, TEST_EVENT
            )
        finally:
            await sender.aclose()

    # --- the pushers ---------------------------------------------------------------------------

    def sender(self, max_connections: int) -> PushSender:
        """The HTTP side of a pusher process (one, shared by its groups)."""
        return PushSender(self.allow_private, max_connections)

    async def targets(self) -> list[PushTarget]:
        """Every push group of an active topic, with its signing secret."""
        async with self._db.connection() as conn:
            return await config.targets(conn, self._sealer)

    async def join(
        self, target: PushTarget, client_id: str, session_timeout_ms: int, window: int
    ) -> Pusher:
        """Join a push group as one of its pushers (409 ``NOT_A_PUSH_GROUP`` once push is off)."""
        async with self._db.connection() as conn:
            joined = await groups.join(
                conn,
                target.environment_id,
                target.topic,
                target.group,
                client_id=client_id,
                session_timeout_ms=session_timeout_ms,
                max_in_flight=window,
                pusher=True,
            )
        return Pusher(joined.member_id, joined.max_in_flight)

    async def nack(
        self, target: PushTarget, ack_id: str, error: str, exact_delay_ms: int | None
    ) -> bool:
        """A failed push: retried after the group's backoff (or exactly ``exact_delay_ms``, an
        endpoint's ``Retry-After``), or dead-lettered after ``maxRetries``; whether it was."""
        async with in_group(self._db, target, target.topic, target.group) as (conn, ref):
            nacked = await delivery.nack(
                conn,
                self._reader,
                ref,
                ack_id,
                error,
                exact_delay_ms=exact_delay_ms,
                on_failure=self._failure_hook(ref),
            )
        self._listener.poke({ref.topic_id})
        return bool(nacked["deadLettered"])

    async def fail_in_place(self, target: PushTarget, ack_id: str, error: str) -> int:
        """A failed push of an ordered group, kept leased for the pusher's own retry: the new
        attempt (409 ``ACK_REJECTED`` when the lease was lost)."""
        async with in_group(self._db, target, target.topic, target.group) as (conn, ref):
            return await delivery.fail_in_place(conn, ref, ack_id, error)

    async def record_failure(
        self,
        target: PushTarget,
        message_id: str,
        attempt: int,
        outcome: PushOutcome,
        dead_lettered: bool,
    ) -> None:
        """Keep a failed attempt for the group's console page."""
        async with self._db.connection() as conn:
            await failures.record(
                conn,
                target.group_id,
                message_id,
                attempt,
                outcome.status_code,
                outcome.reason,
                dead_lettered,
            )


def _test_body(target: PushTarget) -> PushBody:
    """What a test push sends: a message of the group's shape that no topic holds."""
    return PushBody(
        message_id=new_id("test", 20),
        topic=target.topic,
        group=target.group,
        partition=0,
        offset=0,
        attempt=1,
        timestamp=iso_timestamp(int(time.time() * 1000)),
        key=None,
        headers={},
        data=msgspec.Raw(b'{"test":true,"message":"a test push from QueueCore"}'),
    )
