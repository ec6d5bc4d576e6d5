"""Acks of single messages, coalesced: those made while one ack request is out go in the next.

There is no lingering: a lone ack is sent at once. Only acks that would otherwise queue behind
a request in flight (concurrent handlers) share a request, so a consumer running many handlers
settles them in a few requests instead of one round trip each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, Callable

from queuecore.errors import AckRejected

MAX_ACKS_PER_REQUEST = 1000  # the API's limit
SendAcks = Callable[[list[str]], Awaitable[dict[str, Any]]]


class AckBatcher:
    """Sends acks of single messages, those waiting together."""

    def __init__(self, send: SendAcks) -> None:
        self._send = send
        self._waiting: list[tuple[str, asyncio.Future[None]]] = []
        self._sending = False
        self._drainer: asyncio.Future[None] | None = None

    async def ack(self, ack_id: str) -> None:
        """Ack one message; :class:`AckRejected` when its lease ended."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((ack_id, done))
        if not self._sending:
            self._sending = True
            self._drainer = asyncio.ensure_future(self._drain())
        await done

    async def _drain(self) -> None:
        try:
            while self._waiting:
                batch = self._waiting[:MAX_ACKS_PER_REQUEST]
                del self._waiting[:MAX_ACKS_PER_REQUEST]
                await self._send_batch(batch)
        finally:
            self._sending = False

    async def _send_batch(self, batch: list[tuple[str, asyncio.Future[None]]]) -> None:
        try:
            answer = await self._send([ack_id for ack_id, _ in batch])
        except Exception as exc:
            for _, done in batch:
                _settle(done, exc)
            return
        reasons = {r["ackId"]: r.get("reason", "") for r in answer.get("rejected", [])}
        for ack_id, done in batch:
            reason = reasons.get(ack_id)
            _settle(done, None if reason is None else _rejected(ack_id, reason))


def _rejected(ack_id: str, reason: str) -> AckRejected:
    body = {"rejected": [{"ackId": ack_id, "reason": reason}]}
    return AckRejected("ACK_REJECTED", f"the lease of {ack_id} ended: {reason}", 409, "", body)


def _settle(done: asyncio.Future[None], error: BaseException | None) -> None:
    if done.done():
        return
    if error is None:
        done.set_result(None)
    else:
        done.set_exception(error)
