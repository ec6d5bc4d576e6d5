"""Who a data-plane call is for, and the transaction a group's call runs in."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Protocol

from core.db import AsyncPool, Conn
from data_plane import delivery
from data_plane.delivery import GroupRef


class Caller(Protocol):
    """The tenant environment a call is scoped to: every read and write is filtered by it, so
    another environment's topic or group is not found. An API key's ``AuthContext`` is one."""

    @property
    def organisation_id(self) -> str:
        """The organisation, whose tier sets the quotas and limits."""
        ...

    @property
    def environment_id(self) -> str:
        """The environment every resource of the call belongs to."""
        ...


@dataclass(frozen=True, slots=True)
class Scope:
    """A :class:`Caller` for callers that hold no API key's context (the dashboard, a listener
    speaking another protocol)."""

    organisation_id: str
    environment_id: str


def audit_target(environment_id: str, *names: str) -> str:
    """What an audit entry names: ``topic`` or ``topic/group`` in an environment."""
    return f"{'/'.join(names)} ({environment_id})"


@asynccontextmanager
async def in_group(
    db: AsyncPool, caller: Caller, topic: str, group: str
) -> AsyncIterator[tuple[Conn, GroupRef]]:
    """One transaction on the caller's group (read afresh): committed when the block ends
    without an error, rolled back otherwise."""
    async with db.connection() as conn:
        yield conn, await delivery.group_ref(conn, caller.environment_id, topic, group)
