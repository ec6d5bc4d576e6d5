"""One push group in one pusher: its membership, pulls within its window, a POST per message,
and the ack, retry or dead letter each answer calls for."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import Coroutine
from typing import Any

from core.errors import QueueCoreError
from data_plane.service import (
    DataPlane,
    Delivery,
    GroupRef,
    PushOutcome,
    PushSender,
    PushTarget,
    Scope,
    message_id,
    push_body,
)
from observability.logging import get_logger
from pusher.circuit import Circuit
from pusher.leases import Acker, Held, LeaseKeeper
from tenants.ids import new_id

log = get_logger("queuecore.pusher")

PULL_WAIT_MS = 10_000
STOP_GRACE_S = 10.0  # a stopping pusher lets POSTs in flight finish for this long
ACK_GRACE_S = 5.0  # then sends their acks for at most this long
GONE = frozenset({"GROUP_NOT_FOUND", "TOPIC_NOT_FOUND", "NOT_A_PUSH_GROUP"})
Chain = tuple[str, bytes | int]


def backoff_s(retry_delay_ms: int, attempt: int) -> float:
    """A group's retry delay after a failed ``attempt``: ``retryDelay · 2^(attempt-1)``."""
    return retry_delay_ms * 2 ** max(attempt - 1, 0) / 1000


def window_share(max_in_flight: int, owned: int, partitions: int) -> int:
    """This pusher's part of the group's ``maxInFlight``: in proportion to the partitions it
    owns, so that all pushers together hold about ``maxInFlight``; at least one."""
    if partitions <= 0:
        return max_in_flight
    return max(1, math.ceil(max_in_flight * owned / partitions))


class GroupPusher:
    """Delivers one push group's partitions that this pusher owns, until stopped."""

    def __init__(
        self,
        plane: DataPlane,
        target: PushTarget,
        sender: PushSender,
        client_id: str,
        session_timeout_ms: int,
    ) -> None:
        self.plane = plane
        self.target = target
        self._sender = sender
        self._client_id = client_id
        self._session_timeout_ms = session_timeout_ms
        self._scope = Scope(target.organisation_id, target.environment_id)
        self._held: dict[str, Held] = {}
        self._chains: dict[Chain, deque[Held]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._room = asyncio.Event()
        self._stopping = asyncio.Event()
        self._circuit = Circuit()
        self._keeper = LeaseKeeper(self._held, self._extend)
        self._keeper.push_timeout_s = target.settings.timeout_ms / 1000
        self._acker = Acker(self._ack, self._settled)
        self._member_id: str | None = None
        self._window = target.settings.max_in_flight
        self._window_sent: int | None = None
        self._ref: GroupRef | None = None

    def update(self, target: PushTarget) -> None:
        """New settings of the group (endpoint, secret, window, timeout, order)."""
        self.target = target
        self._keeper.push_timeout_s = target.settings.timeout_ms / 1000

    def stop(self) -> None:
        """Stop pulling; :meth:`run` then lets what is in flight finish and leaves."""
        self._stopping.set()
        self._room.set()

    async def run(self) -> None:
        """Deliver until stopped or the group is gone, then leave the group."""
        helpers = [
            asyncio.create_task(self._acker.run()),
            asyncio.create_task(self._keeper.run()),
            asyncio.create_task(self._heartbeats()),
        ]
        try:
            while not self._stopping.is_set():
                if not await self._step():
                    return
        finally:
            await self._finish()
            for helper in helpers:
                helper.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)

    async def _step(self) -> bool:
        """Join if needed, then one pull (or a wait for room); False once the group is gone."""
        try:
            if self._member_id is None:
                await self._join()
            await self._pull_once()
        except QueueCoreError as exc:
            if exc.code in GONE:
                log.info("pusher_group_gone", group_id=self.target.group_id, code=exc.code)
                return False
            if exc.code == "MEMBER_NOT_FOUND":
                self._lost_membership()
                return True
            log.warning("pusher_step_failed", group_id=self.target.group_id, code=exc.code)
            await self._pause(1.0)
        except Exception as exc:  # the database or the object store is away: try again
            log.warning("pusher_step_failed", group_id=self.target.group_id, error=repr(exc))
            await self._pause(1.0)
        return True

    async def _join(self) -> None:
        joined = await self.plane.push.join(
            self.target, self._client_id, self._session_timeout_ms, self._window
        )
        self._member_id, self._window_sent = joined.member_id, self._window
        log.info("pusher_joined", group_id=self.target.group_id, member_id=joined.member_id)

    async def _pull_once(self) -> None:
        """Pull what fits in the window (waiting for messages, or for room when it is full)."""
        free = self._circuit.limit(self._window) - len(self._held)
        if free <= 0:
            self._room.clear()
            await self._wait(self._room, 1.0)
            return
        assert self._member_id is not None
        window = self._window if self._window != self._window_sent else None
        started = time.monotonic()
        pulled = await self._pull(self._member_id, free, window)
        if pulled is None:
            return
        self._window_sent = window or self._window_sent
        self._ref = ref = pulled.ref
        self._keeper.ack_timeout_s = ref.ack_timeout_s
        share = window_share(
            self.target.settings.max_in_flight, len(pulled.partitions), ref.partitions
        )
        self._window = share
        items = [Held(d, started + ref.ack_timeout_s) for d in pulled.deliveries]
        for item in items:
            self._held[item.delivery.ack_id] = item
        try:
            await self._keeper.cover(items)  # one extension for the batch, when leases are short
        except Exception as exc:  # each POST covers its own lease again before it goes
            log.warning("push_extend_failed", group_id=self.target.group_id, error=repr(exc))
        for item in items:
            self._dispatch(item)

    async def _pull(self, member_id: str, limit: int, window: int | None) -> Any:
        """A long-poll pull, abandoned (its leases expired at once) when the group stops."""
        target = self.target
        pull = asyncio.create_task(
            self.plane.pull(
                self._scope, target.topic, target.group, member_id, limit, PULL_WAIT_MS, window
            )
        )
        stop = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait({pull, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not pull.done():
            pull.cancel()
            await asyncio.gather(pull, return_exceptions=True)
            return None
        return pull.result()

    def _dispatch(self, item: Held) -> None:
        """Push at once, or, in an ordered group, after the messages of its key before it."""
        if not self.target.settings.ordered:
            self._spawn(self._push(item))
            return
        chain = _chain_of(item.delivery)
        queue = self._chains.get(chain)
        if queue is not None:
            queue.append(item)
            return
        self._chains[chain] = deque([item])
        self._spawn(self._run_chain(chain))

    async def _run_chain(self, chain: Chain) -> None:
        """One key's (or keyless partition's) messages, one at a time, in order."""
        queue = self._chains[chain]
        try:
            while queue:
                await self._push(queue[0])
                queue.popleft()
        finally:
            if self._chains.get(chain) is queue:  # not a chain begun after a lost membership
                del self._chains[chain]

    async def _push(self, item: Held) -> None:
        """POST a message until it is acked, dead-lettered, handed back or its lease is lost;
        on an error of our own (the database away) it is let go: its lease ends, and it comes
        back as any expired lease does."""
        try:
            await self._push_until_settled(item)
        except Exception as exc:
            log.warning("push_abandoned", group_id=self.target.group_id, error=repr(exc))
            self._drop(item)

    async def _push_until_settled(self, item: Held) -> None:
        attempt = item.delivery.attempt
        while not self._stopping.is_set():
            await self._circuit.turn()
            await self._keeper.cover([item])
            if item.lost or self._stopping.is_set():
                self._drop(item)
                return
            if attempt > item.delivery.attempt:  # a retry of our own: a delivery, metered
                self.plane.delivered(self.target.environment_id, [item.delivery.message])
            outcome = await self._post(item.delivery, attempt)
            if outcome.ok:
                self._circuit.succeeded()
                self._acker.ack(item.delivery.ack_id)
                return
            self._circuit.failed()
            next_attempt = await self._failed(item, attempt, outcome)
            if next_attempt is None:
                return
            attempt = next_attempt

    async def _post(self, delivery: Delivery, attempt: int) -> PushOutcome:
        target, ref = self.target, self._ref
        assert ref is not None
        body = push_body(
            message_id(ref.topic_id, delivery.partition, delivery.offset),
            target.topic,
            target.group,
            delivery.partition,
            delivery.offset,
            attempt,
            delivery.message,
        )
        settings = target.settings
        return await self._sender.post(
            settings.endpoint, target.secret, new_id("psh"), body, settings.timeout_ms / 1000
        )

    async def _failed(self, item: Held, attempt: int, outcome: PushOutcome) -> int | None:
        """Settle a failed POST: in an ordered group, keep the message and retry it after its
        backoff (the next attempt); otherwise nack it (retried later, or dead-lettered)."""
        ref = self._ref
        assert ref is not None
        delivery = item.delivery
        try:
            if self.target.settings.ordered and attempt <= ref.max_retries:
                counted = await self.plane.push.fail_in_place(
                    self.target, delivery.ack_id, outcome.reason
                )
                await self._record(delivery, attempt, outcome, False)
                wait_s = outcome.retry_after_s
                await self._pause(
                    backoff_s(ref.retry_delay_ms, attempt) if wait_s is None else wait_s
                )
                return counted
            exact_ms = None if outcome.retry_after_s is None else int(outcome.retry_after_s * 1000)
            dead = await self.plane.push.nack(
                self.target, delivery.ack_id, outcome.reason, exact_ms
            )
            await self._record(delivery, attempt, outcome, dead)
        except Exception as exc:  # lease lost, or the database away: it comes back on its own
            log.warning("push_settle_failed", group_id=self.target.group_id, error=repr(exc))
        self._drop(item)
        return None

    async def _record(
        self, delivery: Delivery, attempt: int, outcome: PushOutcome, dead: bool
    ) -> None:
        ref = self._ref
        assert ref is not None
        mid = message_id(ref.topic_id, delivery.partition, delivery.offset)
        log.info(
            "push_failed",
            group_id=self.target.group_id,
            message_id=mid,
            attempt=attempt,
            status_code=outcome.status_code,
            error=outcome.reason,
            dead_lettered=dead,
        )
        await self.plane.push.record_failure(self.target, mid, attempt, outcome, dead)

    async def _ack(self, ack_ids: list[str]) -> tuple[list[str], list[dict[str, str]]]:
        try:
            outcome = await self.plane.ack(
                self._scope, self.target.topic, self.target.group, ack_ids
            )
        except QueueCoreError as exc:
            if exc.code != "ACK_REJECTED":
                raise
            return [], list(exc.data.get("body", {}).get("rejected", [])) or [
                {"ackId": ack_id, "reason": exc.message} for ack_id in ack_ids
            ]
        return outcome.done, outcome.rejected

    def _settled(self, ack_ids: list[str]) -> None:
        for ack_id in ack_ids:
            self._held.pop(ack_id, None)
        self._room.set()

    def _drop(self, item: Held) -> None:
        self._held.pop(item.delivery.ack_id, None)
        self._room.set()

    async def _extend(self, ack_ids: list[str], seconds: int) -> list[str]:
        return await self.plane.extend(
            self._scope, self.target.topic, self.target.group, ack_ids, seconds
        )

    async def _heartbeats(self) -> None:
        """Heartbeat every third of the session timeout, pulling or not: it keeps the membership
        alive while the window is full, and it evicts pushers that died (their partitions and
        leases come to the living at once, with no beat needed)."""
        interval = self._session_timeout_ms / 1000 / 3
        while True:
            await asyncio.sleep(interval)
            member = self._member_id
            if member is None:
                continue
            try:
                target = self.target
                await self.plane.groups.heartbeat(self._scope, target.topic, target.group, member)
            except QueueCoreError as exc:
                if exc.code == "MEMBER_NOT_FOUND" and member == self._member_id:
                    self._lost_membership()
            except Exception as exc:
                log.warning("pusher_heartbeat_failed", error=repr(exc))

    def _lost_membership(self) -> None:
        """Evicted (a stall): what it held is delivered again; drop it all and join again."""
        log.warning("pusher_membership_lost", group_id=self.target.group_id, held=len(self._held))
        for task in list(self._tasks):
            task.cancel()
        self._held.clear()
        self._chains.clear()
        self._member_id = None

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("push_task_failed", error=repr(task.exception()))

    async def _wait(self, event: asyncio.Event, timeout_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout_s)

    async def _pause(self, seconds: float) -> None:
        """Sleep, or less when the group stops."""
        await self._wait(self._stopping, seconds)

    async def _finish(self) -> None:
        """Let POSTs in flight end (for a while), send their acks, and leave: the leases of what
        is left end at once, so another pusher delivers it now."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=STOP_GRACE_S)
        for task in list(self._tasks):
            task.cancel()
        try:
            await asyncio.wait_for(self._acker.drained(), ACK_GRACE_S)
        except TimeoutError:
            log.warning("pusher_acks_unsent", group_id=self.target.group_id)
        if self._member_id is not None:
            target = self.target
            try:
                await self.plane.groups.leave(
                    self._scope, target.topic, target.group, self._member_id
                )
            except Exception as exc:  # gone already (push off), or the database away
                log.info("pusher_leave_skipped", group_id=target.group_id, error=repr(exc))


def _chain_of(delivery: Delivery) -> Chain:
    """What orders a message: its key, or its partition when it has none."""
    key = delivery.message.key
    return ("key", key) if key is not None else ("partition", delivery.partition)
