"""Outgoing email over SMTP (``QUEUECORE_SMTP_*``): invitations and password resets.

:class:`SmtpMailer` sends one message per connection with the standard library's ``smtplib``,
off the event loop and bounded by the settings' timeout. Without ``QUEUECORE_SMTP_HOST``,
:func:`mailer` gives a :class:`NoMailer`, which refuses: callers then show the link they would
have mailed to whoever asked for it (an operator's command prints it).
"""

from __future__ import annotations

import asyncio
import smtplib
import ssl
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Protocol

from core.errors import Unavailable
from core.settings import MailSettings


class MailNotSent(Unavailable):
    """The message could not be handed to the SMTP server (or no server is configured)."""

    code = "MAIL_NOT_SENT"


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One plain-text message to one recipient."""

    to: str
    subject: str
    text: str


class Mailer(Protocol):
    """Sends :class:`Outgoing` messages; :class:`MailNotSent` when it cannot."""

    @property
    def enabled(self) -> bool:
        """Whether this mailer sends anything at all."""
        ...

    async def send(self, message: Outgoing) -> None:
        """Hand ``message`` to the mail system."""
        ...


class NoMailer:
    """No SMTP server configured: every send fails with a reason a page can show."""

    enabled = False

    async def send(self, message: Outgoing) -> None:
        """Refuse."""
        raise MailNotSent("Email is not configured on this server (QUEUECORE_SMTP_HOST).")


class SmtpMailer:
    """One SMTP session per message, in a thread, within ``settings.timeout_s``."""

    enabled = True

    def __init__(self, settings: MailSettings) -> None:
        self.settings = settings

    async def send(self, message: Outgoing) -> None:
        """Deliver to the SMTP server; any failure is :class:`MailNotSent` naming its kind."""
        email = self.compose(message)
        try:
            await asyncio.wait_for(
                asyncio.to_thread(self._deliver, email), self.settings.timeout_s + 1
            )
        except (OSError, smtplib.SMTPException, TimeoutError) as exc:
            raise MailNotSent(
                f"The email could not be sent ({type(exc).__name__}).", reason=type(exc).__name__
            ) from exc

    def compose(self, message: Outgoing) -> EmailMessage:
        """The RFC 5322 message: sender from the settings, date, a fresh Message-ID."""
        email = EmailMessage()
        email["From"] = self.settings.sender
        email["To"] = message.to
        email["Subject"] = message.subject
        email["Date"] = formatdate(usegmt=True)
        email["Message-ID"] = make_msgid(domain=self.settings.sender.rpartition("@")[2].strip(">"))
        email.set_content(message.text)
        return email

    def _deliver(self, email: EmailMessage) -> None:
        s = self.settings
        assert s.host is not None
        if s.security == "tls":
            client: smtplib.SMTP = smtplib.SMTP_SSL(
                s.host, s.port, timeout=s.timeout_s, context=ssl.create_default_context()
            )
        else:
            client = smtplib.SMTP(s.host, s.port, timeout=s.timeout_s)
        with client:
            if s.security == "starttls":
                client.starttls(context=ssl.create_default_context())
            if s.username is not None and s.password is not None:
                client.login(s.username, s.password)
            client.send_message(email)


def mailer(settings: MailSettings) -> Mailer:
    """The mailer the settings describe."""
    return SmtpMailer(settings) if settings.enabled else NoMailer()
