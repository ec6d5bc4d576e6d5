"""Invitations: an owner or admin invites an address with a role; the link is valid once and
expires (:data:`~tenants.team.models.INVITATION_TTL_S`); accepting it makes the membership.

Every function runs in the caller's transaction (the API, the dashboard's service and the CLI
share them) and records what it did in the organisation's audit log.
"""

from __future__ import annotations

from typing import Any

from core.db import Conn
from core.errors import ValidationFailed
from tenants import service as tenancy
from tenants.ids import new_id
from tenants.team import audit
from tenants.team import queries as q
from tenants.team.audit import Actor
from tenants.team.members import check_grant, check_role
from tenants.team.models import (
    INVITATION_PREFIX,
    INVITATION_TTL_S,
    AlreadyMember,
    Invitation,
    InvitationNotFound,
    InvitationView,
    NewInvitation,
    PendingInvitationNotFound,
)
from tenants.team.tokens import new_token, stored_hash


def check_email(raw: str) -> str:
    """An address without outer spaces, plausibly one (:class:`ValidationFailed` otherwise)."""
    email = raw.strip()
    local, at, domain = email.rpartition("@")
    if (
        not at
        or not local
        or "." not in domain
        or len(email) > 320
        or any(c in email for c in "\0\r\n ")
    ):
        raise ValidationFailed("email is not a valid address", field="email")
    return email


async def invite(
    conn: Conn,
    organisation_id: str,
    email: str,
    role: str,
    actor: Actor,
    actor_role: str | None,
) -> NewInvitation:
    """A new invitation (replacing a pending one to the same address); ``actor_role`` None is
    the operator, who may grant any role."""
    email, role = check_email(email), check_role(role)
    check_grant(actor_role, role)
    member = await (
        await conn.execute(
            q.MEMBERSHIP_OF_EMAIL, {"organisation_id": organisation_id, "email": email}
        )
    ).fetchone()
    if member is not None:
        raise AlreadyMember(email)
    await conn.execute(
        q.INVITATIONS_SUPERSEDE, {"organisation_id": organisation_id, "email": email}
    )
    token = new_token(INVITATION_PREFIX)
    row = await (
        await conn.execute(
            q.INVITATION_INSERT,
            {
                "id": new_id("inv"),
                "organisation_id": organisation_id,
                "email": email,
                "role": role,
                "token_sha256": stored_hash(token, INVITATION_PREFIX),
                "invited_by": actor.user_id,
                "ttl_s": INVITATION_TTL_S,
            },
        )
    ).fetchone()
    assert row is not None
    await audit.record(conn, organisation_id, actor, "member.invited", email, role=role)
    return NewInvitation(Invitation(**row, invited_by=actor.label), token)


async def pending(conn: Conn, organisation_id: str) -> list[Invitation]:
    """Invitations not yet accepted, revoked or expired, oldest first."""
    rows = await (
        await conn.execute(q.INVITATIONS_PENDING, {"organisation_id": organisation_id})
    ).fetchall()
    return [Invitation(**row) for row in rows]


async def revoke(conn: Conn, organisation_id: str, invitation_id: str, actor: Actor) -> Invitation:
    """Withdraw a pending invitation: its link stops working."""
    row = await (
        await conn.execute(
            q.INVITATION_REVOKE, {"id": invitation_id, "organisation_id": organisation_id}
        )
    ).fetchone()
    if row is None:
        raise PendingInvitationNotFound(invitation_id)
    await audit.record(conn, organisation_id, actor, "invitation.revoked", row["email"])
    return Invitation(**row)


async def view(conn: Conn, token: str) -> InvitationView:
    """The invitation a link names, if it can still be accepted."""
    digest = stored_hash(token, INVITATION_PREFIX)
    row = None
    if digest is not None:
        row = await (await conn.execute(q.INVITATION_BY_TOKEN, {"token_sha256": digest})).fetchone()
    if row is None:
        raise InvitationNotFound
    return InvitationView(**row)


async def accept(conn: Conn, token: str, user_id: str | None, password: str) -> tuple[str, str]:
    """Claim the invitation (once) and make the membership: for ``user_id`` when the address
    has an account (the caller checked its password), else for a new user with ``password``.
    Returns the user's and the organisation's ids."""
    digest = stored_hash(token, INVITATION_PREFIX)
    claimed = None
    if digest is not None:
        claimed = await (
            await conn.execute(q.INVITATION_CLAIM, {"token_sha256": digest})
        ).fetchone()
    if claimed is None:
        raise InvitationNotFound
    if user_id is None:
        user_id = await tenancy.create_user(conn, claimed["email"], password)
    await _join(conn, claimed, user_id)
    return user_id, str(claimed["organisation_id"])


async def _join(conn: Conn, claimed: dict[str, Any], user_id: str) -> None:
    params = {"organisation_id": claimed["organisation_id"], "user_id": user_id}
    await conn.execute(q.MEMBERSHIP_ADD, {**params, "role": claimed["role"]})
    await conn.execute(q.INVITATION_ACCEPTED_BY, {"id": claimed["id"], "user_id": user_id})
    actor = Actor.user(user_id, claimed["email"])
    await audit.record(
        conn,
        claimed["organisation_id"],
        actor,
        "member.joined",
        claimed["email"],
        role=claimed["role"],
    )
