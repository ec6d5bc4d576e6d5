"""``pq.consumer_groups``, ``pq.offsets`` and ``pq.dlq``: a group's settings, position and DLQ."""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal, Union, overload

from queuecore._http import Transport
from queuecore.errors import NotFound
from queuecore.models import (
    UNSET,
    ConfigEntry,
    DeadLetter,
    DeadLetterPage,
    DeadLetterPolicy,
    Duration,
    Fairness,
    Group,
    GroupStats,
    GroupSummary,
    PartitionOffset,
    Unset,
    duration_wire,
)
from queuecore.push import PushConfig, PushTestResult
from queuecore.topics import path

ResetTo = Union[Literal["earliest", "latest"], int]


class _Keep:
    """``push=KEEP``: leave a group's push settings as they are."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP = _Keep()


def group_path(topic: str, group: str, *rest: str) -> str:
    """``/v1/topics/{topic}/groups/{group}/…``."""
    return path("topics", topic, "groups", group, *rest)


def dead_letter_policy(value: DeadLetterPolicy | Mapping[str, Any] | None) -> DeadLetterPolicy:
    """A policy from a :class:`DeadLetterPolicy` or a mapping of its snake_case fields."""
    if value is None:
        return DeadLetterPolicy()
    return value if isinstance(value, DeadLetterPolicy) else DeadLetterPolicy(**value)


def merged_config(
    current: Mapping[str, Any],
    start_from: str | None,
    ack_timeout: Duration | None,
    max_in_flight: int | None,
    session_timeout: Duration | None,
    dead_letter: DeadLetterPolicy,
) -> dict[str, Any]:
    """The group's current settings (camelCase) with the given ones on top."""
    changes = {
        "startFrom": start_from,
        "ackTimeout": None if ack_timeout is None else duration_wire(ack_timeout),
        "maxInFlight": max_in_flight,
        "sessionTimeout": None if session_timeout is None else duration_wire(session_timeout),
    }
    # What GET shows of push (its secret's hint) is not what PUT takes: left out, push stays.
    kept = {k: v for k, v in current.items() if k != "push"}
    body = {**kept, **{k: v for k, v in changes.items() if v is not None}}
    dead = {
        "maxRetries": dead_letter.max_retries,
        "retryDelay": None
        if dead_letter.retry_delay is None
        else duration_wire(dead_letter.retry_delay),
        "alertThreshold": dead_letter.alert_threshold,
    }
    known = dict(current.get("deadLetter") or {})
    body["deadLetter"] = {**known, **{k: v for k, v in dead.items() if v is not None}}
    return body


def _current_push(current: Mapping[str, Any], topic: str, group: str) -> dict[str, Any]:
    """The group's push settings as PUT takes them, with a new secret asked for."""
    push = current.get("push")
    if not push:
        raise ValueError(f"{topic}/{group} is not a push group: give push= to rotate its secret")
    kept = {k: v for k, v in push.items() if k != "secretHint"}
    return {**kept, "rotateSecret": True}


class AsyncConsumerGroups:
    """The consumer groups of a topic."""

    def __init__(self, transport: Transport, offsets: AsyncOffsets) -> None:
        self._transport = transport
        self._offsets = offsets

    async def list(self, topic: str) -> builtins.list[GroupSummary]:
        """``[GroupSummary(name, consumers, lag, dead_letters)]``; consumers counts live members only."""
        body = await self._transport.request(
            "GET", path("topics", topic, "groups"), idempotent=True
        )
        return [GroupSummary(g["name"], g["consumers"], g["lag"], g["deadLetters"]) for g in body]

    async def describe(self, topic: str, group: str) -> Group:
        """Members, partition owners, committed offsets, lag and settings."""
        return Group.from_wire(
            await self._transport.request("GET", group_path(topic, group), idempotent=True)
        )

    async def configure(
        self,
        topic: str,
        group: str,
        *,
        start_from: Literal["earliest", "latest"] | None = None,
        ack_timeout: Duration | None = None,
        max_in_flight: int | None = None,
        session_timeout: Duration | None = None,
        dead_letter: DeadLetterPolicy | Mapping[str, Any] | None = None,
        push: PushConfig | _Keep | None = KEEP,
        rotate_secret: bool = False,
        fairness: Fairness | Mapping[str, Any] | Unset | None = UNSET,
        on_failure: str | Unset | None = UNSET,
    ) -> Group:
        """Create or change a group (admin scope); settings not given keep their current value.

        ``push`` makes it a push group (``None`` turns push off); the answer of the call that
        first turns it on, or that has ``rotate_secret``, carries the signing secret in
        ``push_secret``, once. ``fairness`` makes it a fair group (a :class:`Fairness`, or a
        mapping of its fields; ``Fairness()`` takes the defaults) and None turns fairness off;
        ``on_failure`` is its Lua hook (``function on_failure(msg)``), None removes it.

        The API replaces a group's whole configuration, so the SDK reads it first and sends it
        back with your changes; two concurrent ``configure`` calls may overwrite each other.
        """
        current = await self._current_config(topic, group)
        body = merged_config(
            current,
            start_from,
            ack_timeout,
            max_in_flight,
            session_timeout,
            dead_letter_policy(dead_letter),
        )
        if not isinstance(push, _Keep):
            body["push"] = None if push is None else push.wire(rotate_secret)
        elif rotate_secret:
            body["push"] = _current_push(current, topic, group)
        body.pop("fairness", None)  # kept by the server unless given
        body.pop("onFailure", None)
        if not isinstance(fairness, Unset):
            body["fairness"] = fairness_wire(fairness)
        if not isinstance(on_failure, Unset):
            body["onFailure"] = on_failure
        answer = await self._transport.request(
            "PUT", group_path(topic, group), json=body, idempotent=True
        )
        return Group.from_wire(answer)

    async def test_push(self, topic: str, group: str) -> PushTestResult:
        """Send a signed ``push.test`` event to a push group's endpoint now (admin scope): what
        it answered."""
        answer = await self._transport.request(
            "POST", group_path(topic, group, "push", "test"), idempotent=False
        )
        return PushTestResult.from_wire(answer)

    async def stats(self, topic: str, group: str) -> GroupStats:
        """Depth, in flight, consumers; a fair group's keys (pending, deficit, weight); the
        environment's throttle keys (tokens, rate, burst); its hooks' failures."""
        return GroupStats.from_wire(
            await self._transport.request("GET", group_path(topic, group, "stats"), idempotent=True)
        )

    async def delete(self, topic: str, group: str) -> None:
        """Delete a group with its members and committed offsets (admin scope)."""
        await self._transport.request("DELETE", group_path(topic, group), idempotent=False)

    async def reset_offsets(
        self, topic: str, group: str, to: ResetTo
    ) -> builtins.list[PartitionOffset]:
        """Move every partition to ``"earliest"``, ``"latest"`` or an offset (no members allowed)."""
        return await self._offsets.reset(topic, group, to)

    async def _current_config(self, topic: str, group: str) -> dict[str, Any]:
        try:
            return dict((await self.describe(topic, group)).raw_config)
        except NotFound as exc:
            if exc.code == "GROUP_NOT_FOUND":
                return {}
            raise


class AsyncOffsets:
    """Where a group is in each partition, and moving it."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    @overload
    async def get(self, topic: str, group: str, partition: int) -> PartitionOffset: ...

    @overload
    async def get(
        self, topic: str, group: str, partition: None = None
    ) -> list[PartitionOffset]: ...

    async def get(
        self, topic: str, group: str, partition: int | None = None
    ) -> PartitionOffset | list[PartitionOffset]:
        """One partition's ``current``, ``latest`` and ``lag``; every partition's without one."""
        body = await self._transport.request(
            "GET",
            group_path(topic, group, "offsets"),
            params={"partition": partition},
            idempotent=True,
        )
        if partition is not None:
            return PartitionOffset.from_wire(body, partition)
        return [PartitionOffset.from_wire(p) for p in body["partitions"]]

    async def seek(self, topic: str, group: str, partition: int, offset: int) -> PartitionOffset:
        """Deliver ``partition`` from ``offset`` on (admin scope); its in-flight leases are dropped."""
        body = await self._transport.request(
            "POST",
            group_path(topic, group, "offsets", "seek"),
            json={"partition": partition, "offset": offset},
            idempotent=True,
        )
        return PartitionOffset.from_wire(body, partition)

    async def reset(self, topic: str, group: str, to: ResetTo) -> list[PartitionOffset]:
        """Move every partition (admin scope); :class:`Conflict` while the group has members."""
        body = await self._transport.request(
            "POST", group_path(topic, group, "offsets", "reset"), json={"to": to}, idempotent=True
        )
        return [PartitionOffset.from_wire(p) for p in body["partitions"]]


class AsyncDeadLetters:
    """A group's dead-letter queue: inspect (consume scope), replay (admin scope)."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    async def inspect(
        self, topic: str, group: str, *, limit: int = 100, after: str | None = None
    ) -> DeadLetterPage:
        """Up to ``limit`` dead letters oldest first, after the message id ``after``."""
        body = await self._transport.request(
            "GET",
            group_path(topic, group, "dlq"),
            params={"limit": limit, "after": after},
            idempotent=True,
        )
        return DeadLetterPage.from_wire(body)

    async def messages(
        self, topic: str, group: str, *, page_size: int = 100
    ) -> AsyncIterator[DeadLetter]:
        """Every dead letter of the queue, page by page."""
        after: str | None = None
        while True:
            page = await self.inspect(topic, group, limit=page_size, after=after)
            for message in page.messages:
                yield message
            if page.next_after is None:
                return
            after = page.next_after

    async def replay(self, topic: str, group: str, message_id: str) -> int:
        """Deliver one dead letter to the group again, as attempt 1; returns 1.

        Not retried after a lost answer: the repeat would be refused as already replayed.
        """
        body = await self._transport.request(
            "POST", group_path(topic, group, "dlq", message_id, "replay"), idempotent=False
        )
        return int(body["replayed"])

    async def replay_all(self, topic: str, group: str, *, count: int | None = None) -> int:
        """Deliver the dead letters to the group again, oldest first: all of them, or at most
        ``count``; returns how many."""
        body = await self._transport.request(
            "POST",
            group_path(topic, group, "dlq", "replay"),
            json=None if count is None else {"count": count},
            idempotent=False,
        )
        return int(body["replayed"])


def fairness_wire(fairness: Fairness | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The API's JSON of a group's fairness (None: off)."""
    if fairness is None:
        return None
    if isinstance(fairness, Fairness):
        return fairness.wire()
    return Fairness(
        dict(fairness.get("weights") or {}),
        fairness.get("default_weight", 1),
        fairness.get("quantum", 1),
    ).wire()


class AsyncRuntimeConfig:
    """The environment's runtime configuration: keys and values (writes need the admin scope),
    e.g. ``throttle.<key>.rate`` and ``throttle.<key>.burst``."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    async def set(self, key: str, value: str) -> ConfigEntry:
        """Set ``key`` (created or replaced)."""
        body = await self._transport.request(
            "PUT", path("config", key), json={"value": value}, idempotent=True
        )
        return ConfigEntry(body["key"], body["value"])

    async def get(self, key: str) -> ConfigEntry:
        """The entry; :class:`NotFound` (``CONFIG_KEY_NOT_FOUND``) when it is not set."""
        body = await self._transport.request("GET", path("config", key), idempotent=True)
        return ConfigEntry(body["key"], body["value"])

    async def list(self, prefix: str = "") -> builtins.list[ConfigEntry]:
        """The entries whose key starts with ``prefix``, by key."""
        body = await self._transport.request(
            "GET", path("config"), params={"prefix": prefix or None}, idempotent=True
        )
        return [ConfigEntry(e["key"], e["value"]) for e in body["entries"]]

    async def delete(self, key: str) -> None:
        """Remove ``key``; :class:`NotFound` when it is not set."""
        await self._transport.request("DELETE", path("config", key), idempotent=False)
