"""The SMTP path end to end on this machine: QueueCore's mailer hands a message to the mail
sink that ``queuecore dev`` and the tests run, which keeps, saves and announces it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from core.mail import MailNotSent, NoMailer, Outgoing, SmtpMailer, mailer
from core.settings import MailSettings
from infra.embedded import free_port_block
from infra.mailsink import MailSink, ReceivedMail


def test_a_message_goes_through_smtp_to_the_sink(tmp_path: Path) -> None:
    announced: list[ReceivedMail] = []
    sink = MailSink(free_port_block(), tmp_path / "mail", announced.append)
    sink.start()
    try:
        settings = MailSettings.from_env(sink.env())
        text = "Accept:\nhttp://127.0.0.1:8080/dashboard/invites/qc_inv_abc\n"
        asyncio.run(mailer(settings).send(Outgoing("Ann@Example.com", "You are invited", text)))

        got = sink.wait_for("ann@example.com", "invited", timeout_s=10)
    finally:
        sink.stop()

    assert got.recipients == ("Ann@Example.com",)
    assert got.sender == "queuecore@localhost" and got.subject == "You are invited"
    assert got.links == ["http://127.0.0.1:8080/dashboard/invites/qc_inv_abc"]
    assert announced == [got]
    [saved] = (tmp_path / "mail").glob("*.eml")
    assert b"Subject: You are invited" in saved.read_bytes()


def test_an_unreachable_server_or_none_is_a_clear_refusal() -> None:
    port = free_port_block()  # nothing listens there
    down = SmtpMailer(MailSettings(host="127.0.0.1", port=port, security="none", timeout_s=2))

    with pytest.raises(MailNotSent, match="ConnectionRefusedError"):
        asyncio.run(down.send(Outgoing("a@example.com", "s", "t")))
    with pytest.raises(MailNotSent, match="QUEUECORE_SMTP_HOST"):
        asyncio.run(NoMailer().send(Outgoing("a@example.com", "s", "t")))
    assert isinstance(mailer(MailSettings()), NoMailer)
