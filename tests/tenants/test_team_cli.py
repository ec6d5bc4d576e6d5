"""``queuecore tenants invite|members|set-role|remove-member|revoke-invitation|reset-password|
audit``: the operator's team commands, their emails read from a real SMTP sink."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from core import settings
from infra.cli import main
from infra.mailsink import MailSink
from tests.support.mail import running_sink
from tests.support.services import Services
from tests.support.tenancy import new_organisation


@pytest.fixture(scope="module")
def sink() -> Iterator[MailSink]:
    with running_sink() as started:
        yield started


@pytest.fixture(autouse=True)
def fresh_settings() -> Iterator[None]:
    """Settings read again after each test's environment is restored."""
    yield
    settings.clear_caches()


@pytest.fixture
def smtp(sink: MailSink, services: Services, monkeypatch: pytest.MonkeyPatch) -> MailSink:
    """The commands' email goes to the sink."""
    for name, value in sink.env().items():
        monkeypatch.setenv(name, value)
    settings.clear_caches()
    return sink


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    code = main(["tenants", *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else out), err


def test_invite_emails_and_prints_the_link_then_members_and_roles_change(
    smtp: MailSink, services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    org = new_organisation(services.database_url).organisation.id
    email = f"ops-{secrets.token_hex(4)}@example.com"

    code, invited, _ = run(capsys, "invite", "--org", org, "--email", email, "--role", "admin")
    assert code == 0 and invited["emailed"] is True
    mail = smtp.wait_for(email, "You are invited")
    assert invited["link"] in mail.links and "/dashboard/invites/qc_inv_" in invited["link"]
    code, listed, _ = run(capsys, "members", "--org", org)
    assert [i["email"] for i in listed["invitations"]] == [email]
    assert [m["role"] for m in listed["members"]] == ["owner"]

    owner = listed["members"][0]["email"]
    code, _, err = run(capsys, "set-role", "--org", org, "--email", owner, "--role", "viewer")
    assert code == 1 and "LAST_OWNER" in err
    code, _, err = run(capsys, "remove-member", "--org", org, "--email", owner)
    assert code == 1 and "LAST_OWNER" in err

    invitation = listed["invitations"][0]["id"]
    code, revoked, _ = run(capsys, "revoke-invitation", "--org", org, "--invitation", invitation)
    assert code == 0 and revoked["revoked"]["email"] == email
    code, log, _ = run(capsys, "audit", "--org", org)
    actions = [(e["actor"], e["action"]) for e in log["events"]]
    assert actions[:2] == [
        ("operator (queuecore tenants)", "invitation.revoked"),
        ("operator (queuecore tenants)", "member.invited"),
    ]


def test_reset_password_prints_a_link_even_without_email(
    services: Services, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("QUEUECORE_SMTP_HOST", raising=False)
    settings.clear_caches()
    made = new_organisation(services.database_url)

    code, reset, err = run(capsys, "reset-password", "--email", made.owner_email)

    assert code == 0 and reset["emailed"] is False and "Pass the link on yourself" in err
    assert "/dashboard/reset/qc_rst_" in reset["link"]
    code, _, err = run(capsys, "reset-password", "--email", "nobody@example.com")
    assert code == 1 and "No user has the email" in err
    assert os.environ.get("QUEUECORE_SMTP_HOST") is None
