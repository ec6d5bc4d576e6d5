"""The emails the team services send, and the dashboard links inside them."""

from __future__ import annotations

from datetime import UTC, datetime

from core.mail import Outgoing

INVITATION_PATH = "/dashboard/invites/"
RESET_PATH = "/dashboard/reset/"


def invitation_link(public_url: str, token: str) -> str:
    """Where an invitation is accepted."""
    return f"{public_url.rstrip('/')}{INVITATION_PATH}{token}"


def reset_link(public_url: str, token: str) -> str:
    """Where a new password is set."""
    return f"{public_url.rstrip('/')}{RESET_PATH}{token}"


def _utc(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def invitation_email(
    to: str, organisation: str, role: str, inviter: str, link: str, expires_at: datetime
) -> Outgoing:
    """The invitation: who invites, to what, with which role, and the link."""
    text = (
        f"{inviter} invited you to join {organisation} on QueueCore as {role}.\n\n"
        f"Accept the invitation and choose your password:\n{link}\n\n"
        f"The link works once and until {_utc(expires_at)}.\n"
        "If you did not expect this invitation, ignore this email.\n"
    )
    return Outgoing(to, f"You are invited to {organisation} on QueueCore", text)


def reset_email(to: str, link: str, expires_at: datetime) -> Outgoing:
    """The reset link, and what to do when the request was not yours."""
    text = (
        "Someone asked to reset the password of your QueueCore account.\n\n"
        f"Choose a new password:\n{link}\n\n"
        f"The link works once and until {_utc(expires_at)}. Setting a new password signs you "
        "out everywhere.\nIf you did not ask for this, ignore this email: your password stays "
        "as it is.\n"
    )
    return Outgoing(to, "Reset your QueueCore password", text)
