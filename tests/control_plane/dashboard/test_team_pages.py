"""Teams on the dashboard, over HTTP: invitations by email (read from a real SMTP sink), roles
enforced by the server, members changed and removed, password resets, sign-up switched off, the
audit log. The browser test (test_browser_team.py) walks the same road in Chromium."""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterator

import psycopg
import pytest
from litestar.testing import TestClient

from infra.mailsink import MailSink
from tests.control_plane.dashboard.pages import (
    PASSWORD,
    Browser,
    csrf_field,
    env_url,
    redirect_target,
    text_of,
)
from tests.support.mail import app_with, link_path, running_sink
from tests.support.services import Services
from tests.support.tenancy import new_organisation

NEW_PASSWORD = "a-brand-new-password"


@pytest.fixture(scope="module")
def sink() -> Iterator[MailSink]:
    """The SMTP sink this module's app sends to."""
    with running_sink() as started:
        yield started


@pytest.fixture(scope="module")
def app(services: Services, sink: MailSink) -> Iterator[TestClient]:
    """The app, sending email to the sink."""
    with app_with(sink.env()) as client:
        yield client


@pytest.fixture
def browser(app: TestClient) -> Callable[[], Browser]:
    """Browsers with their own cookies on this module's app."""
    return lambda: Browser(app)


def email_of(role: str) -> str:
    return f"{role}-{secrets.token_hex(4)}@example.com"


def members_path(org_id: str, *parts: str) -> str:
    return "/".join(["/dashboard/orgs", org_id, *parts])


class Team:
    """An organisation with its signed-in owner."""

    def __init__(self, services: Services, browser: Callable[[], Browser]) -> None:
        self.org = new_organisation(services.database_url, tier="pro")
        self.id = self.org.organisation.id
        self.owner = browser()
        assert self.owner.login(self.org.owner_email).status_code == 303
        self.browser = browser

    def invite(self, email: str, role: str, by: Browser | None = None) -> str:
        """Invite through the team page; the path of the link in the email."""
        answer = (by or self.owner).post(
            members_path(self.id, "invitations"), {"email": email, "role": role}
        )
        assert redirect_target(answer) == members_path(self.id, "members") + "?notice=invited"
        return answer.headers["location"]

    def join(self, sink: MailSink, email: str, role: str) -> Browser:
        """Invite, follow the emailed link in a new browser, choose a password: signed in."""
        self.invite(email, role)
        mail = sink.wait_for(email, "You are invited")
        assert f"as {role}" in mail.text and self.org.organisation.name in mail.text
        invitee = self.browser()
        path = link_path(mail, "invites")
        opened = invitee.get(path)
        assert opened.status_code == 200 and role in text_of(opened)
        accepted = invitee.request(
            "POST", path, data={"csrf_token": csrf_field(opened.text), "password": PASSWORD}
        )
        assert redirect_target(accepted) == "/dashboard/?notice=joined"
        assert invitee.get("/dashboard/").status_code == 200
        return invitee

    def member_id(self, email: str) -> str:
        page = self.owner.get(members_path(self.id, "members")).text
        match = re.search(rf'data-member="{re.escape(email)}".*?/members/(usr_\w+)/', page, re.S)
        assert match, f"{email} is not on the team page"
        return match.group(1)


@pytest.fixture
def team(services: Services, browser: Callable[[], Browser]) -> Team:
    return Team(services, browser)


def test_an_invited_developer_joins_through_the_emailed_link_once(
    team: Team, sink: MailSink, services: Services
) -> None:
    email = email_of("dev")
    developer = team.join(sink, email, "developer")

    home = text_of(developer.get("/dashboard/"))
    assert team.org.organisation.name in home and "your role: developer" in home
    listed = text_of(team.owner.get(members_path(team.id, "members")))
    assert email in listed and "Pending invitations" not in listed
    # valid once: the same link again is refused, and changes nothing
    path = link_path(sink.wait_for(email, "You are invited"), "invites")
    again = team.browser().get(path)
    assert again.status_code == 404 and "used already" in text_of(again)
    # the token is stored only as its hash
    token = path.rsplit("/", 1)[1]
    with psycopg.connect(services.database_url) as conn:
        stored = conn.execute(
            "SELECT token_sha256, accepted_at FROM invitations WHERE email = %s", (email,)
        ).fetchone()
    assert stored is not None and stored[1] is not None
    assert token.encode() not in bytes(stored[0]) and len(bytes(stored[0])) == 32


def test_roles_are_enforced_by_the_server(team: Team, sink: MailSink, services: Services) -> None:
    viewer = team.join(sink, email_of("viewer"), "viewer")
    developer = team.join(sink, email_of("dev"), "developer")
    development = env_url(team.org, "development")
    topic = f"team.{secrets.token_hex(3)}"
    assert (
        developer.post(f"{development}/topics", {"name": topic, "partitions": "1"}).status_code
        == 303
    )

    # a viewer cannot create a key, a topic, a test message, or invite anyone
    for path, data in [
        (f"{development}/keys", {"name": "v", "scopes": "publish"}),
        (f"{development}/topics", {"name": "viewer.topic"}),
        (f"{development}/topics/{topic}/messages", {"data": "{}"}),
        (members_path(team.id, "invitations"), {"email": email_of("x"), "role": "viewer"}),
    ]:
        refused = viewer.post(path, data)
        assert refused.status_code == 403, (path, refused.text)
    # a developer publishes a test message but cannot create keys or invite
    sent = developer.post(f"{development}/topics/{topic}/messages", {"data": '{"n": 1}'})
    assert "notice=message-sent" in redirect_target(sent)
    assert developer.post(f"{development}/keys", {"scopes": "publish"}).status_code == 403
    invite = developer.post(
        members_path(team.id, "invitations"), {"email": "a@b.co", "role": "viewer"}
    )
    assert invite.status_code == 403 and "owner or admin" in text_of(invite)
    # everyone sees the team; only owners and admins see the audit log
    assert viewer.get(members_path(team.id, "members")).status_code == 200
    assert viewer.get(members_path(team.id, "audit")).status_code == 403
    # another organisation's team is not there at all
    other = new_organisation(services.database_url).organisation.id
    assert viewer.get(members_path(other, "members")).status_code == 404
    assert team.owner.get(members_path(other, "audit")).status_code == 404


def test_removing_a_member_ends_their_session_at_once(team: Team, sink: MailSink) -> None:
    email = email_of("viewer")
    viewer = team.join(sink, email, "viewer")
    user_id = team.member_id(email)

    confirm = team.owner.get(members_path(team.id, "members", user_id, "remove"))
    assert confirm.status_code == 200 and f"Remove {email}?" in text_of(confirm)
    removed = team.owner.post(members_path(team.id, "members", user_id, "remove"))

    assert redirect_target(removed).endswith("notice=member-removed")
    assert redirect_target(viewer.get("/dashboard/")).startswith("/dashboard/login")
    assert viewer.get("/auth/session").status_code == 401
    assert email not in text_of(team.owner.get(members_path(team.id, "members")))


def test_the_last_owner_stays_and_only_owners_touch_the_owner_role(
    team: Team, sink: MailSink
) -> None:
    admin_email = email_of("admin")
    admin = team.join(sink, admin_email, "admin")
    owner_id = team.member_id(team.org.owner_email)

    demoted = team.owner.post(members_path(team.id, "members", owner_id, "role"), {"role": "admin"})
    removed = team.owner.post(members_path(team.id, "members", owner_id, "remove"))
    assert demoted.status_code == 409 and "at least one owner" in text_of(demoted)
    assert removed.status_code == 409
    by_admin = admin.post(members_path(team.id, "members", owner_id, "remove"))
    promoted = admin.post(
        members_path(team.id, "members", team.member_id(admin_email), "role"), {"role": "owner"}
    )
    assert by_admin.status_code == 403 and promoted.status_code == 403
    # with a second owner, the first may step down
    team.owner.post(
        members_path(team.id, "members", team.member_id(admin_email), "role"), {"role": "owner"}
    )
    stepped = team.owner.post(
        members_path(team.id, "members", owner_id, "role"), {"role": "viewer"}
    )
    assert redirect_target(stepped).endswith("notice=role-changed")
    assert "your role: viewer" in text_of(team.owner.get("/dashboard/"))


def test_a_password_reset_by_emailed_link_works_once_and_signs_out_elsewhere(
    team: Team, sink: MailSink, browser: Callable[[], Browser]
) -> None:
    email = team.org.owner_email
    asker = browser()
    asked = asker.anonymous_form("/dashboard/reset", "/dashboard/reset", {"email": email})
    unknown = browser().anonymous_form(
        "/dashboard/reset", "/dashboard/reset", {"email": email_of("nobody")}
    )
    assert (
        redirect_target(asked) == redirect_target(unknown) == "/dashboard/login?notice=reset-sent"
    )

    path = link_path(sink.wait_for(email, "Reset your QueueCore password"), "reset")
    form = asker.get(path)
    assert form.status_code == 200 and email in text_of(form)
    done = asker.request(
        "POST", path, data={"csrf_token": csrf_field(form.text), "password": NEW_PASSWORD}
    )
    assert redirect_target(done) == "/dashboard/?notice=password-reset"
    assert asker.get("/dashboard/").status_code == 200  # signed in here
    assert team.owner.get("/auth/session").status_code == 401  # and out everywhere else
    assert browser().login(email).status_code == 401  # the old password is gone
    assert browser().login(email, NEW_PASSWORD).status_code == 303
    reused = browser().get(path)
    assert reused.status_code == 404 and "used already" in text_of(reused)


def test_an_expired_invitation_link_is_refused(
    team: Team, sink: MailSink, services: Services
) -> None:
    email = email_of("late")
    team.invite(email, "viewer")
    path = link_path(sink.wait_for(email, "You are invited"), "invites")
    with psycopg.connect(services.database_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE invitations SET expires_at = now() - interval '1 second' WHERE email = %s",
            (email,),
        )

    late = team.browser().get(path)

    assert late.status_code == 404 and "expired" in text_of(late)


def test_the_audit_log_says_who_did_what(team: Team, sink: MailSink) -> None:
    email = email_of("dev")
    team.join(sink, email, "developer")
    team.owner.post(
        members_path(team.id, "members", team.member_id(email), "role"), {"role": "viewer"}
    )
    development = env_url(team.org, "development")
    team.owner.post(f"{development}/keys", {"name": "ci", "scopes": "publish"})

    log = text_of(team.owner.get(members_path(team.id, "audit")))
    rows = re.findall(r'data-action="([\w.]+)"', log)

    assert rows[:4] == ["key.created", "member.role_changed", "member.joined", "member.invited"]
    assert f"{team.org.owner_email}" in log and "previous: developer" in log


def test_without_smtp_the_inviter_gets_the_link_to_pass_on(services: Services) -> None:
    org = new_organisation(services.database_url)
    with app_with({"QUEUECORE_SMTP_HOST": ""}) as client:
        owner = Browser(client)
        assert owner.login(org.owner_email).status_code == 303
        email = email_of("offline")
        answer = owner.post(
            members_path(org.organisation.id, "invitations"), {"email": email, "role": "viewer"}
        )
        assert answer.status_code == 201
        assert "could not be sent" in text_of(answer) and "QUEUECORE_SMTP_HOST" in text_of(answer)
        assert answer.headers["cache-control"] == "no-store"
        link = re.search(r'data-testid="invitation-link">([^<]+)<', answer.text)
        assert link and "/dashboard/invites/qc_inv_" in link.group(1)


def test_sign_up_switched_off_still_lets_invitations_in(services: Services, sink: MailSink) -> None:
    org = new_organisation(services.database_url)
    with app_with({**sink.env(), "QUEUECORE_SIGNUP": "false"}) as client:
        visitor = Browser(client)
        closed = visitor.get("/dashboard/signup")
        assert closed.status_code == 403 and "does not take new sign-ups" in text_of(closed)
        assert "Create an account" not in text_of(visitor.get("/dashboard/login"))
        data = {"name": "Closed", "email": email_of("closed"), "password": PASSWORD}
        posted = visitor.anonymous_form("/dashboard/login", "/dashboard/signup", data)
        assert posted.status_code == 403 and "qc_session" not in visitor.jar

        owner = Browser(client)
        assert owner.login(org.owner_email).status_code == 303
        email = email_of("invited")
        owner.post(
            members_path(org.organisation.id, "invitations"), {"email": email, "role": "viewer"}
        )
        path = link_path(sink.wait_for(email, "You are invited"), "invites")
        form = visitor.get(path)
        joined = visitor.request(
            "POST", path, data={"csrf_token": csrf_field(form.text), "password": PASSWORD}
        )
        assert redirect_target(joined) == "/dashboard/?notice=joined"


def test_every_team_form_is_refused_without_its_csrf_token(
    team: Team, sink: MailSink, browser: Callable[[], Browser]
) -> None:
    email = email_of("forged")
    forged_invite = team.owner.post_without_csrf(
        members_path(team.id, "invitations"), {"email": email, "role": "owner"}
    )
    owner_id = team.member_id(team.org.owner_email)
    forged_role = team.owner.post_without_csrf(
        members_path(team.id, "members", owner_id, "role"), {"role": "viewer"}
    )
    forged_reset = browser().post_without_csrf("/dashboard/reset", {"email": team.org.owner_email})

    assert [forged_invite.status_code, forged_role.status_code, forged_reset.status_code] == [
        403,
        403,
        403,
    ]
    assert "Pending invitations" not in text_of(team.owner.get(members_path(team.id, "members")))
    with pytest.raises(TimeoutError):
        sink.wait_for(email, "You are invited", timeout_s=1)
