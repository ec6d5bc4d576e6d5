"""A consumer's membership: configure the group, join with its window, heartbeat, rejoin, leave.

Heartbeats spend the key's lease budget, not the consume budget of pulls and acks, so a busy
consumer keeps its membership; one that fails is reported and tried again at the next interval.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from queuecore._http import Transport
from queuecore.errors import NotFound, QueueCoreError
from queuecore.groups import AsyncConsumerGroups, group_path
from queuecore.messages import GroupSettings, Membership
from queuecore.models import Duration, duration_wire

if TYPE_CHECKING:
    from queuecore._flow import Holdings


class MembershipMixin:
    """Membership calls of :class:`~queuecore.consumer.AsyncConsumer`."""

    topic: str
    group: str
    client_id: str
    _transport: Transport
    _groups: AsyncConsumerGroups
    _settings: GroupSettings
    _session_timeout: Duration | None
    _membership: Membership | None
    _left: bool
    _log: logging.Logger

    # provided by the consumer
    def _stopping(self) -> bool:
        raise NotImplementedError

    def _window(self) -> int:
        raise NotImplementedError

    def _holdings(self) -> Holdings | None:
        raise NotImplementedError

    def _lock(self) -> asyncio.Lock:
        raise NotImplementedError

    async def _emit(self, event: str, *args: Any) -> None:
        raise NotImplementedError

    async def _wait_stopping(self, timeout_s: float) -> bool:
        raise NotImplementedError

    async def _set_connected(self, connected: bool) -> None:
        raise NotImplementedError

    def _path(self, *rest: str) -> str:
        return group_path(self.topic, self.group, *rest)

    def _current(self) -> Membership:
        membership = self._membership
        if membership is None:
            raise RuntimeError("the consumer has not joined its group")
        return membership

    async def _configure(self) -> None:
        settings = self._settings
        await self._groups.configure(
            self.topic,
            self.group,
            start_from=settings.start_from,  # type: ignore[arg-type]
            ack_timeout=settings.ack_timeout,
            max_in_flight=settings.max_in_flight,
            dead_letter=settings.dead_letter,
        )

    async def _join_request(self, member_id: str | None) -> Membership:
        body: dict[str, Any] = {"clientId": self.client_id[:200], "maxInFlight": self._window()}
        if member_id is not None:
            body["memberId"] = member_id
        if self._session_timeout is not None:
            body["sessionTimeout"] = duration_wire(self._session_timeout)
        # A rejoin with our id is idempotent; a first join would leave a second member behind.
        answer = await self._transport.request(
            "POST", self._path("members"), json=body, idempotent=member_id is not None
        )
        return self._joined(Membership.from_wire(answer))

    def _joined(self, membership: Membership) -> Membership:
        """Tell the holdings what the join answered: the lease length and delivery."""
        holdings = self._holdings()
        if holdings is not None:
            holdings.ack_timeout_s = membership.ack_timeout_s
            holdings.exactly_once = membership.exactly_once
            holdings.window = min(self._window(), membership.max_in_flight or self._window())
        return membership

    async def _rejoin(self, lost: str | None) -> None:
        """Rejoin with our id (``shouldRejoin``), or as a new member when ``lost`` is gone."""
        async with self._lock():
            current = self._membership
            if self._stopping() or current is None:
                return
            if lost is not None and current.member_id != lost:
                return  # the other task replaced the lost member already
            try:
                fresh = await self._join_request(None if lost else current.member_id)
            except NotFound as exc:
                if exc.code != "MEMBER_NOT_FOUND":
                    raise
                fresh = await self._join_request(None)
            if fresh.member_id != current.member_id:
                holdings = self._holdings()
                if holdings is not None:
                    holdings.release_all()  # their leases ended with the old member
            self._membership = fresh
        self._log.info(
            "queuecore consumer %s/%s rejoined as %s (partitions %s)",
            self.topic,
            self.group,
            fresh.member_id,
            fresh.assignments,
        )
        await self._emit("rebalanced", fresh)

    async def _heartbeat_loop(self) -> None:
        while not await self._wait_stopping(self._current().heartbeat_interval_s):
            try:
                await self._heartbeat()
            except Exception as exc:
                if not self._stopping():
                    await self._emit("error", exc)

    async def _heartbeat(self, window: int | None = None) -> None:
        """One heartbeat; with ``window``, the member's window changes too."""
        member_id = self._current().member_id
        body = None if window is None else {"maxInFlight": window}
        try:
            answer = await self._transport.request(
                "POST", self._path("members", member_id, "heartbeat"), json=body, idempotent=True
            )
        except NotFound as exc:
            if exc.code != "MEMBER_NOT_FOUND":
                raise
            await self._rejoin(lost=member_id)
            return
        holdings = self._holdings()
        if holdings is not None and "ackTimeoutMs" in answer:
            holdings.ack_timeout_s = answer["ackTimeoutMs"] / 1000
        if answer["shouldRejoin"]:
            await self._rejoin(lost=None)

    async def _narrow(self, window: int) -> None:
        """Set the member's window now (the bytes held went over their bound, or back under)."""
        if self._membership is None or self._stopping():
            return
        try:
            await self._heartbeat(window)
        except QueueCoreError as exc:
            await self._emit("error", exc)

    async def _leave(self) -> None:
        membership = self._membership
        if membership is None or self._left:
            return
        self._left = True
        try:
            await self._transport.request(
                "DELETE", self._path("members", membership.member_id), idempotent=True
            )
        except NotFound:
            pass  # evicted already
        except QueueCoreError as exc:
            await self._emit("error", exc)  # the server evicts it after its session timeout
        await self._set_connected(False)
