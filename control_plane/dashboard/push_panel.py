"""A push group on its console page: where it pushes, its recent failed pushes, and what the
last test push got back."""

from __future__ import annotations

from typing import Any

from data_plane.service import Caller, DataPlane, GroupView, PushOutcome


async def push_panel(
    data_plane: DataPlane,
    who: Caller,
    view: GroupView,
    tested: PushOutcome | None = None,
) -> dict[str, Any] | None:
    """What the page shows of a push group (None for an ordinary group)."""
    config = view.config.get("push")
    if config is None:
        return None
    failures = await data_plane.push.failures(who, view.topic, view.name)
    return {"config": config, "failures": failures, "tested": tested}
