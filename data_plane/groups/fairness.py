"""A group's fairness settings and its ``onFailure`` hook: the parts of ``PUT …/groups/{group}``
that fair scheduling adds (docs/fair-scheduling.md). Absent from a PUT, each is kept as it was;
``null`` turns it off."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from psycopg.types.json import Jsonb

from core.db import Conn
from core.wire_types import Text
from data_plane.groups import queries as q
from data_plane.hooks.failure import ON_FAILURE
from data_plane.hooks.sandbox import compile_hook

Weight = Annotated[int, msgspec.Meta(ge=1, le=1000)]
FairnessKey = Annotated[Text, msgspec.Meta(max_length=200)]


class FairnessConfig(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``fairness`` of a group: deficit round robin across fairness keys; ``{}`` takes the
    defaults (every key weight 1, quantum 1)."""

    weights: Annotated[dict[FairnessKey, Weight], msgspec.Meta(max_length=1000)] = {}
    default_weight: Weight = 1
    quantum: Weight = 1


OnFailureSource = Annotated[Text, msgspec.Meta(min_length=1, max_length=16_384)]


async def set_fairness(conn: Conn, group_id: str, fairness: FairnessConfig | None) -> None:
    """Make the group fair with these settings, or (None) deliver it in offset order again."""
    params: dict[str, Any] = {"group_id": group_id}
    if fairness is None:
        await conn.execute(q.DISABLE_FAIRNESS, params)
        await conn.execute(q.FORGET_FAIRNESS, params)
        return
    params |= {
        "weights": Jsonb(fairness.weights),
        "default_weight": fairness.default_weight,
        "quantum": fairness.quantum,
    }
    await conn.execute(q.UPSERT_FAIRNESS, params)


async def set_on_failure(conn: Conn, group_id: str, source: str | None) -> None:
    """Save the group's ``onFailure`` hook (compiled first: 422 ``INVALID_HOOK``), or drop it."""
    if source is None:
        await conn.execute(q.DELETE_GROUP_HOOK, {"group_id": group_id})
        return
    compile_hook(source, ON_FAILURE, "onFailure")
    await conn.execute(q.UPSERT_GROUP_HOOK, {"group_id": group_id, "source": source})


async def describe(conn: Conn, group_id: str) -> dict[str, Any]:
    """``fairness`` and ``onFailure`` as a group's config shows them: each only when set."""
    row = await (await conn.execute(q.SELECT_FAIRNESS_AND_HOOK, {"group_id": group_id})).fetchone()
    shown: dict[str, Any] = {}
    if row is not None and row["enabled"]:
        shown["fairness"] = {
            "weights": row["weights"],
            "defaultWeight": row["default_weight"],
            "quantum": row["quantum"],
        }
    if row is not None and row["on_failure"] is not None:
        shown["onFailure"] = row["on_failure"]
    return shown
