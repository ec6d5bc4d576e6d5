"""Members of an organisation: listed, their roles changed, removed.

Owners and admins manage members; only an owner grants, changes or removes the owner role; an
organisation always keeps at least one owner. Removing a member ends every session of theirs at
once. ``actor_role`` None is the operator (``queuecore tenants``), bound only by the last-owner
rule.
"""

from __future__ import annotations

from core.db import Conn
from core.errors import ValidationFailed
from tenants.errors import Forbidden
from tenants.models import ROLES
from tenants.team import audit
from tenants.team import queries as q
from tenants.team.audit import Actor
from tenants.team.models import LastOwner, Member, MemberNotFound

MANAGERS = frozenset({"owner", "admin"})


def check_role(role: str) -> str:
    """One of :data:`~tenants.models.ROLES`."""
    if role not in ROLES:
        raise ValidationFailed(f"role must be one of {', '.join(ROLES)}", field="role")
    return role


def check_manager(actor_role: str | None) -> None:
    """Only owners and admins (and the operator) manage the team."""
    if actor_role is not None and actor_role not in MANAGERS:
        raise Forbidden(
            f"Your role is {actor_role}; you need to be an owner or admin to manage members.",
            role=actor_role,
            action="manage_members",
        )


def check_grant(actor_role: str | None, role: str) -> None:
    """Whether ``actor_role`` may give someone ``role``: the owner role only by an owner."""
    check_manager(actor_role)
    if role == "owner" and actor_role not in {None, "owner"}:
        raise Forbidden(
            "Only an owner can make someone an owner.", role=actor_role, action="grant_owner"
        )


async def list_members(conn: Conn, organisation_id: str) -> list[Member]:
    """Owners first, then admins, developers and viewers, by email."""
    rows = await (
        await conn.execute(q.MEMBERS_LIST, {"organisation_id": organisation_id})
    ).fetchall()
    return [Member(**row) for row in rows]


async def _locked(conn: Conn, organisation_id: str, user_id: str) -> tuple[dict[str, str], int]:
    """The member's row and the number of owners, with every membership locked."""
    rows = await (
        await conn.execute(q.MEMBERS_LOCK, {"organisation_id": organisation_id})
    ).fetchall()
    target = next((row for row in rows if row["user_id"] == user_id), None)
    if target is None:
        raise MemberNotFound(user_id)
    return target, sum(1 for row in rows if row["role"] == "owner")


async def change_role(
    conn: Conn, organisation_id: str, user_id: str, role: str, actor: Actor, actor_role: str | None
) -> Member:
    """Give a member another role; never the last owner's."""
    check_grant(actor_role, check_role(role))
    target, owners = await _locked(conn, organisation_id, user_id)
    if target["role"] == "owner" and actor_role not in {None, "owner"}:
        raise Forbidden("Only an owner can change an owner's role.", role=actor_role)
    if target["role"] == "owner" and role != "owner" and owners <= 1:
        raise LastOwner
    params = {"organisation_id": organisation_id, "user_id": user_id, "role": role}
    await conn.execute(q.MEMBER_SET_ROLE, params)
    await audit.record(
        conn,
        organisation_id,
        actor,
        "member.role_changed",
        target["email"],
        previous=target["role"],
        role=role,
    )
    return next(m for m in await list_members(conn, organisation_id) if m.user_id == user_id)


async def remove(
    conn: Conn, organisation_id: str, user_id: str, actor: Actor, actor_role: str | None
) -> str:
    """Remove a member (never the last owner) and end their sessions; returns their email."""
    check_manager(actor_role)
    target, owners = await _locked(conn, organisation_id, user_id)
    if target["role"] == "owner" and actor_role not in {None, "owner"}:
        raise Forbidden("Only an owner can remove an owner.", role=actor_role)
    if target["role"] == "owner" and owners <= 1:
        raise LastOwner
    await conn.execute(q.MEMBER_DELETE, {"organisation_id": organisation_id, "user_id": user_id})
    # Sessions belong to the user, not to one organisation: all of them end, so nothing the
    # removed member had open keeps working, in this organisation or in a page left open.
    await conn.execute(q.SESSIONS_END_OF_USER, {"user_id": user_id})
    await audit.record(
        conn, organisation_id, actor, "member.removed", target["email"], role=target["role"]
    )
    return str(target["email"])


async def member_by_email(conn: Conn, organisation_id: str, email: str) -> Member:
    """The member with this address (for the operator's commands)."""
    for member in await list_members(conn, organisation_id):
        if member.email.lower() == email.strip().lower():
            return member
    raise MemberNotFound(email)
