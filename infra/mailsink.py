"""A local SMTP sink: a real SMTP server (aiosmtpd) that keeps every message instead of
delivering it.

``queuecore dev`` runs one and points the stack's ``QUEUECORE_SMTP_*`` at it: each message is
saved as an ``.eml`` file under the data directory and announced on the launcher's terminal with
the links it carries, so invitations and password resets can be followed on a laptop. The tests
run the same sink and read what QueueCore really sent.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller

HOST = "127.0.0.1"
_LINK = re.compile(r"https?://\S+")


@dataclass(frozen=True, slots=True)
class ReceivedMail:
    """One message as the sink received it."""

    recipients: tuple[str, ...]
    sender: str
    subject: str
    text: str
    raw: bytes

    @property
    def links(self) -> list[str]:
        """Every http(s) URL in the text, in order."""
        return _LINK.findall(self.text)


def parse(recipients: list[str], sender: str, raw: bytes) -> ReceivedMail:
    """A received message's headers and plain-text body."""
    message = BytesParser(policy=policy.default).parsebytes(raw)
    assert isinstance(message, EmailMessage)
    body = message.get_body(preferencelist=("plain",))
    text = body.get_content() if body is not None else ""
    return ReceivedMail(tuple(recipients), sender, str(message["Subject"] or ""), text, raw)


class _Keep:
    """aiosmtpd handler: every message accepted and handed to the sink."""

    def __init__(self, sink: MailSink) -> None:
        self.sink = sink

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        content = envelope.original_content or envelope.content
        raw = content if isinstance(content, bytes) else str(content).encode()
        self.sink.received(parse(list(envelope.rcpt_tos), str(envelope.mail_from), raw))
        return "250 OK: kept by the QueueCore mail sink"


class MailSink:
    """An SMTP server on ``127.0.0.1:port`` that keeps what it receives (and optionally saves
    each message under ``directory`` and calls ``announce`` with it)."""

    def __init__(
        self,
        port: int,
        directory: Path | None = None,
        announce: Callable[[ReceivedMail], None] | None = None,
    ) -> None:
        self.port = port
        self.directory = directory
        self.announce = announce
        self.messages: list[ReceivedMail] = []
        self._changed = threading.Condition()
        self._controller = Controller(_Keep(self), hostname=HOST, port=port)

    def start(self) -> None:
        """Listen (returns once the server answers)."""
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
        self._controller.start()

    def stop(self) -> None:
        """Stop listening."""
        self._controller.stop()

    def env(self) -> dict[str, str]:
        """The ``QUEUECORE_SMTP_*`` settings that send QueueCore's email here."""
        return {
            "QUEUECORE_SMTP_HOST": HOST,
            "QUEUECORE_SMTP_PORT": str(self.port),
            "QUEUECORE_SMTP_SECURITY": "none",
        }

    def received(self, mail: ReceivedMail) -> None:
        """Keep a message (called from the server's thread)."""
        if self.directory is not None:
            name = f"{time.strftime('%Y%m%dT%H%M%S')}-{len(self.messages) + 1:04d}.eml"
            (self.directory / name).write_bytes(mail.raw)
        with self._changed:
            self.messages.append(mail)
            self._changed.notify_all()
        if self.announce is not None:
            self.announce(mail)

    def wait_for(self, to: str, subject: str = "", timeout_s: float = 30) -> ReceivedMail:
        """The newest message to ``to`` whose subject contains ``subject``, waiting for it."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                for mail in reversed(self.messages):
                    wanted = to.lower() in (r.lower() for r in mail.recipients)
                    if wanted and subject in mail.subject:
                        return mail
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no mail to {to} with {subject!r} within {timeout_s} s")
                self._changed.wait(left)
