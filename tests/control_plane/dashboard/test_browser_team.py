"""A team's first hour in a real browser (Debian's Chromium, driven by Playwright) against a
real ``queuecore serve`` whose email goes to a real SMTP sink (aiosmtpd, as ``queuecore dev``
runs it).

From sign-up: the owner invites a developer and a viewer; both accept through the links in the
emails the sink received; the viewer cannot create a key (the server refuses even a forged
post); the developer publishes a test message; the owner removes the viewer, whose open page
stops working at once; a password reset goes the same way, by emailed link. Nothing secret
reaches the server's log.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from infra.embedded import free_port_block
from infra.mailsink import MailSink
from tests.support.chromium import launched_chromium, patient_context
from tests.support.mail import link_path, running_sink
from tests.support.processes import http_status, queuecore, stop, wait_for
from tests.support.services import Services

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page

pytestmark = pytest.mark.e2e
PASSWORDS = {
    role: f"{role}-password-{secrets.token_hex(4)}" for role in ("owner", "developer", "viewer")
}
NEW_PASSWORD = f"reset-password-{secrets.token_hex(4)}"


@dataclass
class Server:
    """A ``queuecore serve`` that mails through the sink, and its log."""

    url: str
    log: Path
    sink: MailSink


@pytest.fixture(scope="module")
def server(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log, port = tmp_path_factory.mktemp("team-serve") / "serve.log", free_port_block()
    with running_sink() as sink:
        env = {
            **services.env(),
            **sink.env(),
            "QUEUECORE_HTTP_PORT": str(port),
            "QUEUECORE_PUBLIC_URL": f"http://127.0.0.1:{port}",
            "QUEUECORE_LOG_FORMAT": "json",
            "QUEUECORE_LOG_LEVEL": "DEBUG",
        }
        proc = queuecore(["serve", "--workers", "1"], env, log)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_for(lambda: http_status(f"{url}/readyz") == 200, 60, "api ready", proc, log)
            yield Server(url, log, sink)
        finally:
            stop(proc)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    with launched_chromium() as browser:
        yield browser


def person(chromium: Browser) -> tuple[BrowserContext, Page]:
    context = patient_context(chromium)
    return context, context.new_page()


def sign_up_owner(page: Page, server: Server, email: str) -> None:
    from playwright.sync_api import expect

    page.goto(f"{server.url}/dashboard/signup")
    page.get_by_label("Organisation name").fill("Team Co")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORDS["owner"])
    page.get_by_role("button", name="Create account").click()
    # signed in at once, in the development environment
    expect(page.get_by_role("status")).to_contain_text("Your organisation is ready")
    expect(page.locator("a.env-development")).to_have_attribute("aria-current", "page")


def invite(page: Page, email: str, role: str) -> None:
    from playwright.sync_api import expect

    page.get_by_role("link", name="Team", exact=True).first.click()
    page.get_by_label("Email").fill(email)
    page.get_by_label("Role", exact=True).select_option(role)
    page.get_by_role("button", name="Send invitation").click()
    expect(page.get_by_role("status")).to_contain_text("The invitation was emailed")
    expect(page.get_by_test_id("pending-invitations")).to_contain_text(email)


def accept(chromium: Browser, server: Server, email: str, role: str) -> tuple[BrowserContext, Page]:
    from playwright.sync_api import expect

    mail = server.sink.wait_for(email, "You are invited to Team Co")
    context, page = person(chromium)
    page.goto(server.url + link_path(mail, "invites"))
    expect(page.get_by_test_id("invited-role")).to_have_text(role)
    page.get_by_label("Choose a password").fill(PASSWORDS[role])
    page.get_by_role("button", name="Accept and join").click()
    expect(page.get_by_role("status")).to_contain_text("you joined the organisation")
    expect(page.get_by_role("heading", name="Team Co")).to_contain_text(f"your role: {role}")
    environment = page.locator("a.env-development")
    expect(environment).to_have_css("color", "rgb(37, 86, 196)")  # looks like the link it is
    environment.click()
    return context, page


def test_a_team_forms_by_email_roles_hold_and_a_removed_member_is_out(
    chromium: Browser, server: Server
) -> None:
    from playwright.sync_api import expect

    tag = secrets.token_hex(4)
    emails = {role: f"{role}-{tag}@example.com" for role in PASSWORDS}
    owner_context, owner = person(chromium)
    sign_up_owner(owner, server, emails["owner"])
    invite(owner, emails["developer"], "developer")
    invite(owner, emails["viewer"], "viewer")
    developer_context, developer = accept(chromium, server, emails["developer"], "developer")
    viewer_context, viewer = accept(chromium, server, emails["viewer"], "viewer")

    # the viewer sees keys but has no form, and the server refuses a forged post
    viewer.locator("ul.sections").get_by_role("link", name="API keys").click()
    expect(viewer.get_by_text("can see keys but not create or revoke them")).to_be_visible()
    expect(viewer.get_by_role("button", name="Create key")).to_have_count(0)
    token = viewer.locator('input[name="csrf_token"]').first.get_attribute("value")
    forged = viewer.request.post(
        viewer.url, form={"csrf_token": token or "", "name": "x", "scopes": "publish"}
    )
    assert forged.status == 403 and "you need to be an owner or admin" in forged.text()

    # the developer creates a topic and publishes a test message from its page
    developer.locator("ul.sections").get_by_role("link", name="Topics").click()
    developer.get_by_label("Name").fill("team.events")
    developer.get_by_label("Partitions").fill("1")
    developer.get_by_role("button", name="Create topic").click()
    developer.get_by_label("Data").fill('{"hello": "team"}')
    developer.get_by_role("button", name="Send").click()
    expect(developer.get_by_role("status")).to_contain_text("stored at offset 0 of this partition")

    # the owner removes the viewer: the viewer's open page stops working at once
    owner.get_by_role("link", name="Team", exact=True).first.click()
    owner.get_by_role("link", name=f"Remove {emails['viewer']}").click()
    owner.get_by_role("button", name=f"Remove {emails['viewer']}").click()
    expect(owner.get_by_role("status")).to_contain_text("removed and signed out everywhere")
    expect(owner.get_by_test_id("members")).not_to_contain_text(emails["viewer"])
    viewer.reload()
    expect(viewer.get_by_role("heading", name="Sign in")).to_be_visible()

    # the audit log has it all, by whom
    owner.get_by_role("link", name="Audit log").first.click()
    audit = owner.get_by_test_id("audit")
    expect(audit.locator('tr[data-action="member.removed"]')).to_contain_text(emails["viewer"])
    expect(audit.locator('tr[data-action="topic.created"]')).to_contain_text(emails["developer"])
    for context in (owner_context, developer_context, viewer_context):
        context.close()

    # a password reset, by emailed link: once, and the new password signs in
    reset_context, page = person(chromium)
    page.goto(f"{server.url}/dashboard/login")
    page.get_by_role("link", name="Forgot your password?").click()
    page.get_by_label("Email").fill(emails["developer"])
    page.get_by_role("button", name="Email me a link").click()
    expect(page.get_by_role("status")).to_contain_text("a link to choose a new password")
    link = server.url + link_path(server.sink.wait_for(emails["developer"], "Reset your"), "reset")
    page.goto(link)
    page.get_by_label("New password").fill(NEW_PASSWORD)
    page.get_by_role("button", name="Set password").click()
    expect(page.get_by_role("status")).to_contain_text("Your new password is set")
    page.goto(link)
    expect(page.get_by_role("heading", level=1)).to_have_text("Not found")  # used up
    page.goto(f"{server.url}/dashboard/")
    page.locator("form[action$='/logout'] button").click()
    page.get_by_label("Email").fill(emails["developer"])
    page.get_by_label("Password").fill(NEW_PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Your organisations")).to_be_visible()
    reset_context.close()

    # no password, link or token in the server's log (DEBUG, JSON)
    log = server.log.read_text(errors="replace")
    assert "qc_inv_" not in log.replace("qc_inv_[REDACTED]", "")
    assert "qc_rst_" not in log.replace("qc_rst_[REDACTED]", "")
    assert all(password not in log for password in [*PASSWORDS.values(), NEW_PASSWORD])
