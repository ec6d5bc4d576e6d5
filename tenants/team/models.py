"""What the team services return, and their errors."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from core.errors import Conflict, NotFound

INVITATION_TTL_S = 7 * 24 * 3600
RESET_TTL_S = 3600
INVITATION_PREFIX = "qc_inv_"  # recognisable, so logs and traces can mask them
RESET_PREFIX = "qc_rst_"


@dataclass(frozen=True, slots=True)
class OrganisationAccess:
    """A signed-in user's standing in one organisation."""

    organisation_id: str
    organisation_name: str
    user_id: str
    email: str
    role: str


@dataclass(frozen=True, slots=True)
class Invitation:
    """A pending invitation, as listed (never its token)."""

    id: str
    organisation_id: str
    email: str
    role: str
    created_at: datetime
    expires_at: datetime
    invited_by: str | None = None


@dataclass(frozen=True, slots=True)
class NewInvitation:
    """An invitation just made: the only time its token exists outside a hash."""

    invitation: Invitation
    token: str


@dataclass(frozen=True, slots=True)
class InvitationView:
    """What an invitation link's page shows to whoever opens it."""

    id: str
    organisation_id: str
    organisation_name: str
    email: str
    role: str
    expires_at: datetime
    invited_by: str | None
    has_account: bool


@dataclass(frozen=True, slots=True)
class Member:
    """A user's membership of an organisation."""

    user_id: str
    email: str
    role: str
    joined_at: datetime


@dataclass(frozen=True, slots=True)
class NewReset:
    """A password reset link's token, for the email only."""

    user_id: str
    email: str
    token: str
    expires_at: datetime


class InvitationNotFound(NotFound):
    """Unknown, used, replaced, revoked or expired: one answer for all."""

    code = "INVITATION_NOT_FOUND"

    def __init__(self) -> None:
        super().__init__(
            "This invitation link is not valid: it was used already, replaced by a newer "
            "invitation, revoked, or it expired. Ask the organisation's owner or an admin for a "
            "new one."
        )


class PendingInvitationNotFound(NotFound):
    """No pending invitation with this id in the organisation."""

    code = "INVITATION_NOT_FOUND"

    def __init__(self, invitation_id: str) -> None:
        super().__init__(
            f"No pending invitation '{invitation_id}' in this organisation.",
            invitation_id=invitation_id,
        )


class AlreadyMember(Conflict):
    """The invited address belongs to a member already."""

    code = "ALREADY_MEMBER"

    def __init__(self, email: str) -> None:
        super().__init__(
            f"{email} is a member of this organisation already: change their role instead.",
            email=email,
        )


class MemberNotFound(NotFound):
    """No such member in the organisation."""

    code = "MEMBER_NOT_FOUND"

    def __init__(self, who: str) -> None:
        super().__init__(f"{who} is not a member of this organisation.", member=who)


class LastOwner(Conflict):
    """The change would leave the organisation without an owner."""

    code = "LAST_OWNER"

    def __init__(self) -> None:
        super().__init__(
            "An organisation needs at least one owner: make another member an owner first."
        )


class ResetLinkInvalid(NotFound):
    """Unknown, used, superseded or expired reset link: one answer for all."""

    code = "RESET_LINK_INVALID"

    def __init__(self) -> None:
        super().__init__(
            "This password reset link is not valid: it was used already, a newer one was sent, "
            "or it expired. Ask for a new one."
        )
