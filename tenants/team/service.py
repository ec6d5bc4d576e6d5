"""``TeamService``: the dashboard's door to accounts and teams.

It owns its connections and transactions (one per call, committed on success) and sends the
emails after the commit, so an email never announces something that was rolled back. Pages call
it and translate; they open no connection themselves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from core.db import AsyncPool, Conn
from core.mail import Mailer, MailNotSent, Outgoing
from observability.logging import get_logger
from tenants import access as tenant_access
from tenants import service as tenancy
from tenants import sessions
from tenants.access import EnvironmentAccess, Workspace
from tenants.errors import InvalidCredentials, OrganisationNotFound
from tenants.models import ApiKey, IssuedKey, NewOrganisation
from tenants.passwords import DUMMY_HASH, verify_password
from tenants.sessions import NewSession
from tenants.team import audit, emails, invites, members, resets
from tenants.team import queries as q
from tenants.team.audit import Actor, AuditEvent
from tenants.team.models import Invitation, InvitationView, Member, OrganisationAccess

log = get_logger("queuecore.team")


@dataclass(frozen=True, slots=True)
class SignedUp:
    """A new owner's session, and the development environment they start in."""

    session: NewSession
    environment_id: str


@dataclass(frozen=True, slots=True)
class Delivery:
    """How an invitation reached its recipient: by email, or as a link to pass on by hand."""

    invitation: Invitation
    emailed: bool
    link: str | None = None  # only when the email could not be sent
    problem: str | None = None


class TeamService:
    """Sign-up, access, members, invitations, password resets and the audit log."""

    def __init__(self, db: AsyncPool, mailer: Mailer, public_url: str) -> None:
        self.db = db
        self.mailer = mailer
        self.public_url = public_url

    async def sign_up(self, name: str, email: str, password: str) -> SignedUp:
        """A new organisation owned by a new user, signed in."""
        async with self.db.connection() as conn:
            made: NewOrganisation = await tenancy.sign_up(conn, name, email, password)
            owner = Actor.user(made.owner_id, made.owner_email)
            await audit.record(
                conn, made.organisation.id, owner, "organisation.created", made.organisation.name
            )
            opened = await sessions.start_session(conn, made.owner_id)
        return SignedUp(opened, made.project.environment("development").id)

    async def organisation(
        self, user_id: str, email: str, organisation_id: str
    ) -> OrganisationAccess:
        """The user's standing in an organisation of theirs (:class:`OrganisationNotFound` for
        any other, so ids reveal nothing)."""
        async with self.db.connection() as conn:
            row = await (
                await conn.execute(
                    q.ORGANISATION_ACCESS,
                    {"organisation_id": organisation_id, "user_id": user_id},
                )
            ).fetchone()
        if row is None:
            raise OrganisationNotFound(organisation_id)
        return OrganisationAccess(row["id"], row["name"], user_id, email, row["role"])

    async def environment(
        self, user_id: str, environment_id: str, action: str | None = None
    ) -> EnvironmentAccess:
        """An environment of the user's organisations, after checking their role may perform
        ``action`` (:class:`~tenants.errors.Forbidden` otherwise)."""
        async with self.db.connection() as conn:
            found = await tenant_access.environment_access(conn, user_id, environment_id)
        if action is not None:
            found.require(action)
        return found

    async def workspaces(self, user_id: str) -> list[Workspace]:
        """Every organisation of the user with its projects and environments."""
        async with self.db.connection() as conn:
            return await tenant_access.workspaces(conn, user_id)

    async def list_keys(self, environment_id: str, include_revoked: bool = False) -> list[ApiKey]:
        """An environment's keys, without their secrets."""
        async with self.db.connection() as conn:
            return await tenancy.list_keys(conn, environment_id, include_revoked)

    async def create_key(
        self,
        organisation_id: str,
        environment_id: str,
        actor: Actor,
        *,
        name: str = "",
        scopes: Iterable[str] | None = None,
        expires_at: datetime | None = None,
    ) -> IssuedKey:
        """Issue a key in an environment (two active at most), recorded in the audit log."""
        async with self.db.connection() as conn:
            issued = await tenancy.create_key(
                conn, environment_id, name=name, scopes=scopes, expires_at=expires_at
            )
            key = issued.key
            await audit.record(
                conn,
                organisation_id,
                actor,
                "key.created",
                f"{key.id} ({environment_id})",
                name=key.name,
                scopes=",".join(key.scopes),
                hint=key.hint,
            )
        return issued

    async def revoke_key(
        self, organisation_id: str, environment_id: str, key_id: str, actor: Actor
    ) -> ApiKey:
        """Revoke a key of the environment, recorded in the audit log."""
        async with self.db.connection() as conn:
            key = await tenancy.revoke_key(conn, environment_id, key_id)
            await audit.record(
                conn,
                organisation_id,
                actor,
                "key.revoked",
                f"{key.id} ({environment_id})",
                name=key.name,
                hint=key.hint,
            )
        return key

    async def members(self, org: OrganisationAccess) -> tuple[list[Member], list[Invitation]]:
        """The members and the pending invitations."""
        async with self.db.connection() as conn:
            return (
                await members.list_members(conn, org.organisation_id),
                await invites.pending(conn, org.organisation_id),
            )

    async def invite(self, org: OrganisationAccess, email: str, role: str) -> Delivery:
        """Invite an address; the link goes by email, or back to the inviter when it cannot."""
        async with self.db.connection() as conn:
            made = await invites.invite(
                conn, org.organisation_id, email, role, self._actor(org), org.role
            )
        link = emails.invitation_link(self.public_url, made.token)
        message = emails.invitation_email(
            made.invitation.email,
            org.organisation_name,
            made.invitation.role,
            org.email,
            link,
            made.invitation.expires_at,
        )
        problem = await self._send(message, "invitation")
        if problem is None:
            return Delivery(made.invitation, emailed=True)
        return Delivery(made.invitation, emailed=False, link=link, problem=problem)

    async def revoke_invitation(self, org: OrganisationAccess, invitation_id: str) -> Invitation:
        """Withdraw a pending invitation."""
        members.check_manager(org.role)
        async with self.db.connection() as conn:
            return await invites.revoke(conn, org.organisation_id, invitation_id, self._actor(org))

    async def change_role(self, org: OrganisationAccess, user_id: str, role: str) -> Member:
        """Give a member another role."""
        async with self.db.connection() as conn:
            return await members.change_role(
                conn, org.organisation_id, user_id, role, self._actor(org), org.role
            )

    async def remove_member(self, org: OrganisationAccess, user_id: str) -> str:
        """Remove a member; their sessions end at once. Returns their email."""
        async with self.db.connection() as conn:
            return await members.remove(
                conn, org.organisation_id, user_id, self._actor(org), org.role
            )

    async def invitation(self, token: str) -> InvitationView:
        """The invitation a link names, while it can be accepted."""
        async with self.db.connection() as conn:
            return await invites.view(conn, token)

    async def accept_invitation(self, token: str, password: str) -> NewSession:
        """Accept: a new account with ``password``, or the existing account of the invited
        address when ``password`` is its password. Signs the user in."""
        async with self.db.connection() as conn:
            found = await invites.view(conn, token)
            user_id = await self._existing_user(conn, found, password)
            if user_id is None:
                tenancy.check_password(password)
            joined, _ = await invites.accept(conn, token, user_id, password)
            return await sessions.start_session(conn, joined)

    async def _existing_user(self, conn: Conn, found: InvitationView, password: str) -> str | None:
        """The account of the invited address after checking its password (None if none)."""
        if not found.has_account:
            return None
        user = await (await conn.execute(q.USER_PASSWORD, {"email": found.email})).fetchone()
        stored = str(user["password_hash"]) if user else DUMMY_HASH
        if user is None or not await asyncio.to_thread(verify_password, stored, password):
            raise InvalidCredentials
        return str(user["id"])

    async def request_password_reset(self, email: str) -> None:
        """Email a reset link to the account with this address; nothing when there is none
        (the caller's answer is the same either way)."""
        async with self.db.connection() as conn:
            made = await resets.request(conn, email)
        if made is None:
            log.info("password_reset_unknown_email")  # the address itself is never logged
            return
        link = emails.reset_link(self.public_url, made.token)
        await self._send(emails.reset_email(made.email, link, made.expires_at), "password_reset")

    async def reset_email(self, token: str) -> str:
        """The address whose password a live reset link sets."""
        async with self.db.connection() as conn:
            return await resets.email_of(conn, token)

    async def reset_password(self, token: str, password: str) -> NewSession:
        """Set the new password through the link (once); every other session ends, and this
        browser is signed in."""
        async with self.db.connection() as conn:
            user_id = await resets.complete(conn, token, password)
            return await sessions.start_session(conn, user_id)

    async def audit_log(
        self, org: OrganisationAccess, before_id: int | None = None, limit: int = 50
    ) -> list[AuditEvent]:
        """A page of the organisation's log, newest first (owners and admins)."""
        members.check_manager(org.role)
        async with self.db.connection() as conn:
            return await audit.page(conn, org.organisation_id, limit, before_id)

    @staticmethod
    def _actor(org: OrganisationAccess) -> Actor:
        return Actor.user(org.user_id, org.email)

    async def _send(self, message: Outgoing, purpose: str) -> str | None:
        """Send; the reason it failed, or None. Never logs the message (it holds a link)."""
        try:
            await self.mailer.send(message)
        except MailNotSent as exc:
            log.warning("mail_not_sent", purpose=purpose, reason=exc.data.get("reason"))
            return exc.message
        log.info("mail_sent", purpose=purpose)
        return None
