"""A push group's settings and signing secret: checked, stored (the secret sealed), listed for
the pushers, and shown without the secret."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.db import Conn
from core.errors import ValidationFailed
from core.sealed import Sealer, SealError
from data_plane.deadletters.alerts import check_url, generate_secret, secret_hint
from data_plane.groups import push_members
from data_plane.groups import service as groups
from data_plane.groups.push_schemas import TIMEOUT_MS, PushConfigRequest
from data_plane.push import queries as q
from observability.logging import get_logger

log = get_logger("queuecore.push")


@dataclass(frozen=True, slots=True)
class PushSettings:
    """Where and how a group's messages are pushed."""

    endpoint: str
    max_in_flight: int = 10
    timeout_ms: int = 30_000
    ordered: bool = False


@dataclass(frozen=True, slots=True)
class PushTarget:
    """A push group as a pusher delivers it: where, how, and the secret it signs with."""

    group_id: str
    organisation_id: str
    environment_id: str
    topic: str
    group: str
    settings: PushSettings
    secret: str


def checked(request: PushConfigRequest, allow_private: bool) -> PushSettings:
    """The settings of a request: an https endpoint (http too where private addresses are
    allowed, for development), a timeout of 1 s to 10 min."""
    endpoint = check_url(request.endpoint, allow_private, field="push.endpoint")
    if not allow_private and not endpoint.startswith("https:"):
        raise ValidationFailed("push.endpoint: must be an https URL", field="push.endpoint")
    timeout_ms = groups.parse_duration_ms(request.timeout, "push.timeout", TIMEOUT_MS)
    return PushSettings(endpoint, request.max_in_flight, timeout_ms, request.ordered)


async def apply(
    conn: Conn,
    group_id: str,
    group: str,
    request: PushConfigRequest | None,
    sealer: Sealer,
    allow_private: bool,
) -> str | None:
    """Turn push on, change it, or turn it off (``None``), the group's row locked; the new
    signing secret when this call made one (on first enabling, or ``rotateSecret``)."""
    if request is None:
        await conn.execute(q.DELETE_PUSH, {"group_id": group_id})
        gone = await push_members.remove_pushers(conn, group_id)
        log.info("push_turned_off", group_id=group_id, pushers_removed=gone)
        return None
    settings = checked(request, allow_private)
    if await groups.push_settings(conn, group_id) is None:
        live = await push_members.make_room_for_push(conn, group_id)
        if live:
            raise groups.GroupHasActiveMembers(
                f"Group '{group}' has {live} live member(s): a push group has none. Stop them "
                "(or wait for their session timeout) before turning push on.",
                group=group,
            )
    secret = generate_secret()
    row = await (
        await conn.execute(q.UPSERT_PUSH, _params(group_id, settings, secret, sealer, request))
    ).fetchone()
    fresh = bool(row and row["fresh"])
    log.info("push_configured", group_id=group_id, new_secret=fresh, ordered=settings.ordered)
    return secret if fresh else None


def _params(
    group_id: str,
    settings: PushSettings,
    secret: str,
    sealer: Sealer,
    request: PushConfigRequest,
) -> dict[str, Any]:
    return {
        "group_id": group_id,
        "endpoint": settings.endpoint,
        "max_in_flight": settings.max_in_flight,
        "timeout_ms": settings.timeout_ms,
        "ordered": settings.ordered,
        "secret": sealer.seal(secret, group_id),
        "secret_hint": secret_hint(secret),
        "rotate": request.rotate_secret,
    }


def view(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """``config.push`` of a group as GET shows it: never the secret, only its hint."""
    if row is None:
        return None
    return {
        "endpoint": row["endpoint"],
        "maxInFlight": row["max_in_flight"],
        "timeout": groups.format_duration_ms(row["timeout_ms"]),
        "ordered": row["ordered"],
        "secretHint": row["secret_hint"],
    }


async def targets(conn: Conn, sealer: Sealer) -> list[PushTarget]:
    """Every push group of an active topic, its secret opened (one that cannot be is skipped
    and logged: the deployment's secrets key changed)."""
    rows = await (await conn.execute(q.SELECT_TARGETS)).fetchall()
    return [target for row in rows if (target := _target(dict(row), sealer)) is not None]


async def target(
    conn: Conn, environment_id: str, topic: str, group: str, sealer: Sealer
) -> PushTarget | None:
    """One push group of the environment, or None if it is not one."""
    params = {"environment_id": environment_id, "topic": topic, "group": group}
    row = await (await conn.execute(q.SELECT_TARGET, params)).fetchone()
    return None if row is None else _target(dict(row), sealer)


def _target(row: dict[str, Any], sealer: Sealer) -> PushTarget | None:
    try:
        secret = sealer.open(row["secret"], row["group_id"])
    except SealError as exc:
        log.error("push_secret_unreadable", group_id=row["group_id"], error=str(exc))
        return None
    return PushTarget(
        group_id=row["group_id"],
        organisation_id=row["organisation_id"],
        environment_id=row["environment_id"],
        topic=row["topic"],
        group=row["group_name"],
        settings=PushSettings(
            row["endpoint"], row["max_in_flight"], row["timeout_ms"], row["ordered"]
        ),
        secret=secret,
    )
