"""``pq.topics``: create, list, describe, update and delete topics (admin scope)."""

from __future__ import annotations

import builtins
from urllib.parse import quote

from queuecore._http import Transport
from queuecore.models import UNSET, Topic, Unset


def path(*segments: str) -> str:
    """``/v1/…`` with each segment percent-encoded (names may hold any character)."""
    return "/v1/" + "/".join(quote(s, safe="") for s in segments)


class AsyncTopics:
    """The topics of the API key's environment."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    async def create(
        self,
        name: str,
        *,
        retention: str | None = None,
        delivery: str | None = None,
        partitions: int | None = None,
        latency_class: str | None = None,
        on_enqueue: str | None = None,
    ) -> Topic:
        """Create a topic; :class:`Conflict` (``TOPIC_EXISTS``) when the name is taken.

        ``on_enqueue`` is a Lua hook (``function on_enqueue(msg)``) that may set each message's
        fairness key, weight and throttle keys; :class:`ValidationError` (``INVALID_HOOK``)
        when it does not compile."""
        body = {
            "name": name,
            "retention": retention,
            "delivery": delivery,
            "partitions": partitions,
            "latencyClass": latency_class,
            "onEnqueue": on_enqueue,
        }
        sent = {k: v for k, v in body.items() if v is not None}
        # Not idempotent: a create whose answer was lost would be refused as TOPIC_EXISTS.
        return Topic.from_wire(
            await self._transport.request("POST", path("topics"), json=sent, idempotent=False)
        )

    async def list(self) -> builtins.list[Topic]:
        """Every active topic, by name."""
        body = await self._transport.request("GET", path("topics"), idempotent=True)
        return [Topic.from_wire(t) for t in body["topics"]]

    async def describe(self, name: str) -> Topic:
        """One topic with its stats; :class:`NotFound` when it does not exist."""
        return Topic.from_wire(
            await self._transport.request("GET", path("topics", name), idempotent=True)
        )

    async def update(
        self,
        name: str,
        *,
        partitions: int | None = None,
        retention: str | None = None,
        latency_class: str | None = None,
        on_enqueue: str | Unset | None = UNSET,
    ) -> Topic:
        """Raise the partition count, change retention or latency class (partitions only grow);
        set the ``on_enqueue`` hook, or remove it with None."""
        body = {"partitions": partitions, "retention": retention, "latencyClass": latency_class}
        sent: dict[str, object] = {k: v for k, v in body.items() if v is not None}
        if not isinstance(on_enqueue, Unset):
            sent["onEnqueue"] = on_enqueue
        # Setting the same values twice leaves the same topic: safe to retry.
        return Topic.from_wire(
            await self._transport.request("PATCH", path("topics", name), json=sent, idempotent=True)
        )

    async def delete(self, name: str) -> Topic:
        """Delete a topic: its name is free at once, its data is removed in the background."""
        # Not retried after a lost answer: the repeat would report the deleted topic as missing.
        return Topic.from_wire(
            await self._transport.request("DELETE", path("topics", name), idempotent=False)
        )
