"""``queuecore tenants invite|members|set-role|remove-member|revoke-invitation|reset-password|
audit``: the operator's team commands, in the audit log as the operator.

They run the same functions as the dashboard, in the caller's transaction (``tenants.cli``
opens it). ``invite`` and ``reset-password`` print the link as well as emailing it (when
``QUEUECORE_SMTP_*`` is set), so an operator without email can pass it on.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from tenants.models import ROLES

if TYPE_CHECKING:
    from core.db import Conn


def add_team_commands(commands: Any) -> None:
    """Register the team commands on ``queuecore tenants``."""
    invite = commands.add_parser(
        "invite", help="invite an email to an organisation with a role; prints the link"
    )
    invite.add_argument("--org", required=True, help="organisation id (org_…)")
    invite.add_argument("--email", required=True)
    invite.add_argument("--role", choices=ROLES, required=True)
    members = commands.add_parser("members", help="members, roles and pending invitations")
    members.add_argument("--org", required=True, help="organisation id (org_…)")
    role = commands.add_parser("set-role", help="change a member's role (never the last owner's)")
    role.add_argument("--org", required=True, help="organisation id (org_…)")
    role.add_argument("--email", required=True, help="the member's email")
    role.add_argument("--role", choices=ROLES, required=True)
    remove = commands.add_parser(
        "remove-member", help="remove a member (never the last owner); their sessions end"
    )
    remove.add_argument("--org", required=True, help="organisation id (org_…)")
    remove.add_argument("--email", required=True, help="the member's email")
    revoke = commands.add_parser("revoke-invitation", help="withdraw a pending invitation")
    revoke.add_argument("--org", required=True, help="organisation id (org_…)")
    revoke.add_argument("--invitation", required=True, help="invitation id (inv_…)")
    reset = commands.add_parser(
        "reset-password", help="make a password reset link for a user; prints it"
    )
    reset.add_argument("--email", required=True)
    audit = commands.add_parser("audit", help="the organisation's audit log, newest first")
    audit.add_argument("--org", required=True, help="organisation id (org_…)")
    audit.add_argument("--limit", type=int, default=50, help="at most this many (≤ 100)")


async def _invite(args: argparse.Namespace, conn: Conn) -> dict[str, Any]:
    from core import settings
    from tenants.service import get_organisation
    from tenants.team import emails, invites
    from tenants.team.audit import OPERATOR

    organisation = await get_organisation(conn, args.org)
    made = await invites.invite(conn, organisation.id, args.email, args.role, OPERATOR, None)
    link = emails.invitation_link(settings.http().public_url, made.token)
    message = emails.invitation_email(
        made.invitation.email,
        organisation.name,
        made.invitation.role,
        "The operator of this QueueCore server",
        link,
        made.invitation.expires_at,
    )
    return {"invitation": _invitation(made.invitation), "link": link, "_mail": message}


async def _members(args: argparse.Namespace, conn: Conn) -> dict[str, Any]:
    from tenants.service import get_organisation
    from tenants.team import invites, members

    await get_organisation(conn, args.org)
    return {
        "members": [
            {"id": m.user_id, "email": m.email, "role": m.role, "joinedAt": m.joined_at}
            for m in await members.list_members(conn, args.org)
        ],
        "invitations": [_invitation(i) for i in await invites.pending(conn, args.org)],
    }


async def _set_role(args: argparse.Namespace, conn: Conn) -> dict[str, Any]:
    from tenants.team import members
    from tenants.team.audit import OPERATOR

    member = await members.member_by_email(conn, args.org, args.email)
    changed = await members.change_role(conn, args.org, member.user_id, args.role, OPERATOR, None)
    return {"member": {"id": changed.user_id, "email": changed.email, "role": changed.role}}


async def _remove_member(args: argparse.Namespace, conn: Conn) -> dict[str, Any]:
    from tenants.team import members
    from tenants.team.audit import OPERATOR

    member = await members.member_by_email(conn, args.org, args.email)
    await members.remove(conn, args.org, member.user_id, OPERATOR, None)
    return {"removed": {"id": member.user_id, "email": member.email, "role": member.role}}


async def _revoke_invitation(args: argparse.Namespace, conn: Conn) -> dict[str, Any]:
    from tenants.team import invites
    from tenants.team.audit import OPERATOR

    return {"revoked": _invitation(await invites.revoke(conn, args.org, args.invitation, OPERATOR))}


async def _reset_password(args: argparse.Namespace, conn: Conn) -> dict[str, Any]:
    from core import settings
    from core.errors import NotFound
    from tenants.team import emails, resets

    made = await resets.request(conn, args.email)
    if made is None:
        raise NotFound(f"No user has the email {args.email!r}.", email=args.email)
    link = emails.reset_link(settings.http().public_url, made.token)
    message = emails.reset_email(made.email, link, made.expires_at)
    return {
        "user": {"id": made.user_id, "email": made.email},
        "link": link,
        "expiresAt": made.expires_at,
        "_mail": message,
    }


async def _audit(args: argparse.Namespace, conn: Conn) -> dict[str, Any]:
    from tenants.service import get_organisation
    from tenants.team import audit

    await get_organisation(conn, args.org)
    events = await audit.page(conn, args.org, args.limit)
    return {
        "events": [
            {
                "id": e.id,
                "at": e.at,
                "actor": e.actor,
                "action": e.action,
                "target": e.target,
                "details": e.details,
            }
            for e in events
        ]
    }


def _invitation(invitation: Any) -> dict[str, Any]:
    return {
        "id": invitation.id,
        "organisationId": invitation.organisation_id,
        "email": invitation.email,
        "role": invitation.role,
        "createdAt": invitation.created_at,
        "expiresAt": invitation.expires_at,
    }


TEAM_COMMANDS = {
    "invite": _invite,
    "members": _members,
    "set-role": _set_role,
    "remove-member": _remove_member,
    "revoke-invitation": _revoke_invitation,
    "reset-password": _reset_password,
    "audit": _audit,
}
