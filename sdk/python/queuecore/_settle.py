"""Settling in the background: acks, nacks and lease extensions, sent in batches.

An ack is queued and its caller goes on (``ack_with_result`` waits for the verdict). Queued acks
go in one request :data:`ACK_LINGER_S` after the first, at once when ``urgent()`` says the
consumer is starved (half its window waits for acks: the server leases it nothing more until
they land), and when the consumer stops. One request is in flight at a time and the next starts
at least :data:`MIN_INTERVAL_S` after the previous one, so a fast consumer spends a few consume
requests a second on acks, never one per message. Nacks ride in the same flushes (one request
for many), then extensions: after the acks queued before them, so an extension never names an
offset whose ack is on its way (which would split the range lease it belongs to on the server).

A refused ack or nack is told to ``report`` once per request, whatever the number of ids.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional

from queuecore._http import Transport
from queuecore.errors import AckRejected, QueueCoreError
from queuecore.models import Duration, duration_wire

ACK_LINGER_S = 0.05
MIN_INTERVAL_S = 0.05
MAX_IDS = 1000  # the API's most ids per ack, nack or extend request

Report = Callable[[QueueCoreError], Awaitable[None]]
Done = Optional["asyncio.Future[Any]"]


@dataclass
class _Ack:
    ack_id: str
    done: Done


@dataclass
class _Nack:
    ack_id: str
    error: str
    retry_delay: Duration | None
    done: Done


@dataclass
class _Extend:
    ack_ids: list[str]
    seconds: int
    done: asyncio.Future[list[str]]


def rejection(ack_ids: Sequence[str], reasons: Sequence[str], total: int) -> AckRejected:
    """One error for the refused ids of a request of ``total`` ids."""
    first = reasons[0] if reasons else "the lease ended"
    body = {"rejected": [{"ackId": a, "reason": r} for a, r in zip(ack_ids, reasons)]}
    text = f"{len(ack_ids)} of {total} refused: {first}"
    return AckRejected("ACK_REJECTED", text, 409, "", body)


class Settler:
    """Batches a consumer's acks, nacks and extensions into few requests."""

    def __init__(
        self,
        transport: Transport,
        path: Callable[[str], str],
        report: Report,
        urgent: Callable[[int], bool],
    ) -> None:
        self._transport, self._path, self._report, self._urgent = transport, path, report, urgent
        self._acks: list[_Ack] = []
        self._nacks: list[_Nack] = []
        self._extends: list[_Extend] = []
        self._refused: list[tuple[_Ack, str]] = []  # refused here, before any request
        self._lock = asyncio.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._last_start = 0.0
        self._flushes: set[asyncio.Task[None]] = set()

    @property
    def pending(self) -> int:
        """Settlements queued and not sent yet."""
        return len(self._acks) + len(self._nacks) + len(self._extends)

    def ack(self, ack_id: str, wait: bool) -> asyncio.Future[None] | None:
        """Queue an ack; with ``wait``, a future of its verdict (AckRejected when refused)."""
        done = _future() if wait else None
        self._acks.append(_Ack(ack_id, done))
        self._schedule(0 if self._urgent(len(self._acks)) else ACK_LINGER_S)
        return done

    def refuse(self, ack_id: str, reason: str, wait: bool) -> asyncio.Future[None] | None:
        """An ack not worth sending (its lease is known to have ended): refused with the next flush."""
        item = _Ack(ack_id, _future() if wait else None)
        self._refused.append((item, reason))
        self._schedule(ACK_LINGER_S)
        return item.done

    def nack(self, ack_id: str, error: str, retry_delay: Duration | None, wait: bool) -> Done:
        """Queue a nack; with ``wait``, a future of whether it was dead-lettered."""
        done = _future() if wait else None
        self._nacks.append(_Nack(ack_id, error, retry_delay, done))
        self._schedule(ACK_LINGER_S)
        return done

    def extend(self, ack_ids: list[str], seconds: int) -> asyncio.Future[list[str]]:
        """Queue an extension, sent at once after the acks queued before it; the ids extended."""
        done: asyncio.Future[list[str]] = _future()
        self._extends.append(_Extend(list(ack_ids), seconds, done))
        self._schedule(0)
        return done

    async def flush(self, paced: bool = False) -> None:
        """Send everything queued now (after the request in flight, if any)."""
        async with self._lock:
            if not (self.pending or self._refused):
                return
            if paced:
                wait_s = self._last_start + MIN_INTERVAL_S - asyncio.get_running_loop().time()
                if wait_s > 0:
                    await asyncio.sleep(wait_s)
            self._last_start = asyncio.get_running_loop().time()
            acks, self._acks = self._acks, []
            refused, self._refused = self._refused, []
            nacks, self._nacks = self._nacks, []
            extends, self._extends = self._extends, []
            await self._send_acks(acks, refused)
            await self._send_nacks(nacks)
            await self._send_extends(extends)

    async def close(self) -> None:
        """Send what is queued and stop the timer."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        await self.flush()
        if self._flushes:
            await asyncio.wait(set(self._flushes))

    def _schedule(self, delay_s: float) -> None:
        if self._flushes:
            return  # a flush is on its way: its end schedules the next for what is left
        loop = asyncio.get_running_loop()
        if self._timer is not None:
            if delay_s > 0 or self._timer.when() <= loop.time():
                return
            self._timer.cancel()
        self._timer = loop.call_later(delay_s, self._fire)

    def _fire(self) -> None:
        self._timer = None
        task = asyncio.ensure_future(self.flush(paced=True))
        self._flushes.add(task)
        task.add_done_callback(self._flushed)

    def _flushed(self, task: asyncio.Task[None]) -> None:
        self._flushes.discard(task)
        if task.cancelled() or task.exception() is not None:
            return
        if self._extends or self._urgent(len(self._acks)):
            self._schedule(0)
        elif self.pending or self._refused:
            self._schedule(ACK_LINGER_S)

    # --- requests ------------------------------------------------------------------------------

    async def _send_acks(self, acks: list[_Ack], refused: list[tuple[_Ack, str]]) -> None:
        refusals = [(item.ack_id, reason) for item, reason in refused]
        for item, reason in refused:
            _settle(item.done, rejection([item.ack_id], [reason], 1))
        for first in range(0, len(acks), MAX_IDS):
            chunk = acks[first : first + MAX_IDS]
            refusals += await self._send_ack_chunk(chunk)
        if refusals:
            ids, reasons = zip(*refusals)
            await self._report(rejection(ids, reasons, len(acks) + len(refused)))

    async def _send_ack_chunk(self, chunk: list[_Ack]) -> list[tuple[str, str]]:
        ids = list(dict.fromkeys(item.ack_id for item in chunk))
        try:
            answer = await self._transport.request(
                "POST", self._path("ack"), json={"ackIds": ids}, idempotent=True
            )
            rejected = answer.get("rejected", [])
        except AckRejected as exc:
            rejected = exc.rejected
        except QueueCoreError as exc:
            for item in chunk:
                _settle(item.done, exc)
            await self._report(exc)
            return []
        reasons = {r["ackId"]: r.get("reason", "the lease ended") for r in rejected}
        for item in chunk:
            reason = reasons.get(item.ack_id)
            _settle(item.done, None if reason is None else rejection([item.ack_id], [reason], 1))
        return list(reasons.items())

    async def _send_nacks(self, nacks: list[_Nack]) -> None:
        for first in range(0, len(nacks), MAX_IDS):
            chunk = nacks[first : first + MAX_IDS]
            body = {"nacks": [_nack_wire(item) for item in chunk]}
            try:
                answer = await self._transport.request(
                    "POST", self._path("nack"), json=body, idempotent=False
                )
            except AckRejected as exc:
                answer = {"nacked": [], "rejected": exc.rejected}
            except QueueCoreError as exc:
                for item in chunk:
                    _settle(item.done, exc)
                await self._report(exc)
                continue
            await self._nacked(chunk, answer)

    async def _nacked(self, chunk: list[_Nack], answer: dict[str, Any]) -> None:
        dead = {n["ackId"]: bool(n["deadLettered"]) for n in answer.get("nacked", [])}
        reasons = {
            r["ackId"]: r.get("reason", "the lease ended") for r in answer.get("rejected", [])
        }
        for item in chunk:
            if item.ack_id in dead:
                _settle(item.done, None, dead[item.ack_id])
            else:
                reason = reasons.get(item.ack_id, "the lease ended")
                _settle(item.done, rejection([item.ack_id], [reason], 1))
        if reasons:
            await self._report(rejection(list(reasons), list(reasons.values()), len(chunk)))

    async def _send_extends(self, extends: list[_Extend]) -> None:
        for item in extends:
            extended: list[str] = []
            try:
                for first in range(0, len(item.ack_ids), MAX_IDS):
                    body = {
                        "ackIds": item.ack_ids[first : first + MAX_IDS],
                        "seconds": item.seconds,
                    }
                    answer = await self._transport.request(
                        "POST", self._path("extend"), json=body, idempotent=True
                    )
                    extended += answer["extended"]
            except QueueCoreError as exc:
                _settle(item.done, exc)
                continue
            _settle(item.done, None, extended)


def _nack_wire(item: _Nack) -> dict[str, Any]:
    wire: dict[str, Any] = {"ackId": item.ack_id, "error": item.error}
    if item.retry_delay is not None:
        wire["retryDelay"] = duration_wire(item.retry_delay)
    return wire


def _future() -> asyncio.Future[Any]:
    done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    done.add_done_callback(_retrieved)
    return done


def _retrieved(done: asyncio.Future[Any]) -> None:
    """Mark a verdict seen: nobody need await it (it was reported already)."""
    if not done.cancelled():
        done.exception()


def _settle(done: Done, error: BaseException | None, result: Any = None) -> None:
    if done is None or done.done():
        return
    if error is None:
        done.set_result(result)
    else:
        done.set_exception(error)
