"""Sign-up, sign-in and sign-out pages: sessions, CSRF on every form, errors on the page."""

from __future__ import annotations

import io
import re
import secrets
from collections.abc import Callable, Iterator
from contextlib import redirect_stdout
from pathlib import Path

import psycopg
import pytest
from litestar.testing import TestClient

from control_plane.edge.resources import resources_of
from core.settings import DevStackSettings, HttpSettings
from infra.devstack import DevStack
from tenants.login_throttle import LoginThrottle, ThrottlePolicy
from tenants.models import NewOrganisation
from tests.control_plane.dashboard.pages import PASSWORD, Browser, redirect_target, text_of
from tests.support.services import Services


def unique_email() -> str:
    return f"signup-{secrets.token_hex(5)}@example.com"


def users_named(database_url: str, email: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT count(*) FROM users WHERE lower(email) = lower(%s)", (email,))
        return int(row.fetchone()[0])  # type: ignore[index]


@pytest.fixture
def own_throttle(client: TestClient) -> Iterator[Callable[[ThrottlePolicy], None]]:
    """A login throttle of the test's own (failed logins here count nowhere else)."""
    app = client.app
    before = app.state.get("login_throttle")

    def install(policy: ThrottlePolicy) -> None:
        prefix = f"qc:login-test:{{{secrets.token_hex(6)}}}"
        app.state["login_throttle"] = LoginThrottle(
            resources_of(app).redis, policy, key_prefix=prefix
        )

    install(ThrottlePolicy())
    yield install
    if before is None:
        app.state.pop("login_throttle", None)
    else:
        app.state["login_throttle"] = before


def test_the_printed_dev_url_and_the_bare_server_url_lead_to_the_login_page(
    browser: Callable[[], Browser], tmp_path: Path
) -> None:
    stack = DevStack(
        dev=DevStackSettings(tmp_path, 5433, 6380, 8333),
        http=HttpSettings("127.0.0.1", 8080, 1, "http://127.0.0.1:8080"),
        environ={},
    )
    printed = io.StringIO()
    with redirect_stdout(printed):
        stack._banner(
            {
                "QUEUECORE_DATABASE_URL": "postgresql://x",
                "QUEUECORE_OBJECT_STORE_URL": "s3://queuecore",
                "QUEUECORE_REDIS_URL": "redis://x",
                "QUEUECORE_SMTP_HOST": "127.0.0.1",
            }
        )
    match = re.search(r"Dashboard:\s+http://127\.0\.0\.1:8080(\S+)", printed.getvalue())
    assert match, printed.getvalue()
    anonymous = browser()
    page = anonymous.get(match.group(1))
    assert page.status_code == 200
    assert "<h1>Sign in</h1>" in page.text
    assert '<label for="email">Email</label>' in page.text

    assert redirect_target(anonymous.get("/")) == "/dashboard/"
    assert redirect_target(anonymous.get("/dashboard/")).startswith("/dashboard/login?next=")


def test_sign_up_makes_an_organisation_with_its_owner_project_and_environments(
    browser: Callable[[], Browser], services: Services
) -> None:
    visitor, email = browser(), unique_email()
    response = visitor.signup("Acme Rockets", email)
    # Signed in at once, in the new organisation's development environment.
    target = redirect_target(response)
    assert re.fullmatch(r"/dashboard/envs/env_\w+/topics\?notice=welcome", target), target
    assert "qc_session" in visitor.jar
    landing = text_of(visitor.get(target))
    assert "Your organisation is ready" in landing and "Topics" in landing
    assert 'aria-current="page">development<' in landing.replace("\n", "")

    page = visitor.get("/dashboard/")
    assert page.status_code == 200
    text = text_of(page)
    assert "Acme Rockets" in text and "your role: owner" in text
    assert all(f">{name}</a>" in text for name in ("development", "staging", "production"))
    session = visitor.get("/auth/session").json()
    assert session["user"]["email"] == email
    assert [(o["name"], o["role"]) for o in session["organisations"]] == [("Acme Rockets", "owner")]
    with psycopg.connect(services.database_url) as conn:
        envs = conn.execute(
            "SELECT e.name, (SELECT count(*) FROM api_keys k WHERE k.environment_id = e.id)"
            " FROM environments e JOIN projects p ON p.id = e.project_id"
            " WHERE p.organisation_id = %s AND p.name = 'default' ORDER BY e.name",
            (session["organisations"][0]["id"],),
        ).fetchall()
    # No key was made behind the user's back: each one they get, they see once.
    assert envs == [("development", 0), ("production", 0), ("staging", 0)]


@pytest.mark.parametrize(
    ("name", "password", "status", "message"),
    [
        ("Acme", "short", 422, "password needs at least 10 characters"),
        ("   ", PASSWORD, 422, "organisation name must be 1 to 200 characters"),
        ("x" * 201, PASSWORD, 422, "organisation name must be 1 to 200 characters"),
    ],
)
def test_sign_up_mistakes_are_explained_on_the_form_and_nothing_is_created(
    browser: Callable[[], Browser],
    services: Services,
    name: str,
    password: str,
    status: int,
    message: str,
) -> None:
    visitor, email = browser(), unique_email()
    response = visitor.signup(name, email, password)
    assert response.status_code == status, response.text
    assert message in text_of(response)
    assert 'role="alert"' in response.text
    assert f'value="{email}"' in response.text  # what was typed is kept (never the password)
    assert password not in response.text
    assert "qc_session" not in visitor.jar
    assert users_named(services.database_url, email) == 0


def test_sign_up_with_a_taken_email_says_so_and_signs_nobody_in(
    browser: Callable[[], Browser], org: NewOrganisation, services: Services
) -> None:
    visitor = browser()
    taken = visitor.signup("Another", org.owner_email.upper())

    assert taken.status_code == 409
    assert "An account with this email exists already" in text_of(taken)
    assert "qc_session" not in visitor.jar
    assert users_named(services.database_url, org.owner_email) == 1


def test_sign_up_is_throttled_per_client_address(
    browser: Callable[[], Browser], client: TestClient
) -> None:
    app = client.app
    before = app.state.get("signup_throttle")
    prefix = f"qc:signup-test:{{{secrets.token_hex(6)}}}"
    policy = ThrottlePolicy(max_failures_per_account=100, max_failures_per_address=3)
    app.state["signup_throttle"] = LoginThrottle(resources_of(app).redis, policy, key_prefix=prefix)
    try:
        answers = [browser().signup("Many", unique_email()) for _ in range(4)]
    finally:
        app.state["signup_throttle"] = before
    assert [a.status_code for a in answers[:3]] == [303, 303, 303]
    assert answers[3].status_code == 429
    assert int(answers[3].headers["retry-after"]) >= 1
    assert "Too many sign-up attempts" in text_of(answers[3])


def test_sign_in_and_sign_up_forms_are_refused_without_their_csrf_token(
    browser: Callable[[], Browser], org: NewOrganisation, services: Services
) -> None:
    visitor, email = browser(), unique_email()
    forged = {"email": org.owner_email, "password": PASSWORD}
    assert visitor.post_without_csrf("/dashboard/login", forged).status_code == 403
    opened = visitor.get("/dashboard/login")  # the cookie is set, but the form must echo it
    assert opened.status_code == 200
    refused = visitor.request("POST", "/dashboard/login", data={**forged, "csrf_token": "nope"})
    assert refused.status_code == 403
    assert "This form was not accepted" in text_of(refused)
    signup = {"name": "Forged", "email": email, "password": PASSWORD}
    assert visitor.post_without_csrf("/dashboard/signup", signup).status_code == 403
    assert "qc_session" not in visitor.jar
    assert users_named(services.database_url, email) == 0


def test_a_wrong_password_is_explained_and_a_right_one_goes_where_the_user_was_going(
    browser: Callable[[], Browser],
    org: NewOrganisation,
    own_throttle: Callable[[ThrottlePolicy], None],
) -> None:
    visitor = browser()
    wanted = f"/dashboard/envs/{org.project.environment('staging').id}/keys"
    sent_to_login = redirect_target(visitor.get(wanted))
    assert sent_to_login.startswith("/dashboard/login?next=")

    wrong = visitor.login(org.owner_email, "not-the-password", next=wanted)
    assert wrong.status_code == 401
    assert "Email or password is incorrect." in text_of(wrong)
    assert "qc_session" not in visitor.jar

    right = visitor.login(org.owner_email, next=wanted)
    assert redirect_target(right) == wanted
    assert visitor.get(wanted).status_code == 200


def test_sign_in_never_redirects_to_another_site(
    browser: Callable[[], Browser], org: NewOrganisation
) -> None:
    for target in ("https://evil.example/", "//evil.example/dashboard/", "/dashboard/\\evil"):
        visitor = browser()
        assert redirect_target(visitor.login(org.owner_email, next=target)) == "/dashboard/"


def test_too_many_failed_sign_ins_are_throttled_on_the_page_with_retry_after(
    browser: Callable[[], Browser],
    org: NewOrganisation,
    own_throttle: Callable[[ThrottlePolicy], None],
) -> None:
    own_throttle(ThrottlePolicy(max_failures_per_account_and_address=2, window_ms=60_000))
    visitor = browser()
    assert [visitor.login(org.owner_email, "wrong-password!").status_code for _ in range(2)] == [
        401,
        401,
    ]
    throttled = visitor.login(org.owner_email)  # even the right password waits
    assert throttled.status_code == 429
    assert 1 <= int(throttled.headers["Retry-After"]) <= 60
    assert "Too many failed sign-in attempts. Try again in" in text_of(throttled)
    assert "qc_session" not in visitor.jar


def test_sign_out_needs_the_csrf_token_then_ends_the_session(owner: Browser) -> None:
    assert owner.post_without_csrf("/dashboard/logout").status_code == 403
    assert owner.get("/dashboard/").status_code == 200  # still signed in

    signed_out = owner.post("/dashboard/logout")
    assert redirect_target(signed_out) == "/dashboard/login?notice=signed-out"
    assert "You are signed out." in owner.get("/dashboard/login?notice=signed-out").text
    assert redirect_target(owner.get("/dashboard/")).startswith("/dashboard/login")
    assert owner.get("/auth/session").status_code == 401


def test_the_auth_api_takes_the_csrf_token_from_a_form_field_as_well_as_the_header(
    owner: Browser,
) -> None:
    refused = owner.request("POST", "/auth/logout", data={"csrf_token": "wrong"})
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "CSRF_FAILED"
    assert owner.get("/auth/session").status_code == 200
    done = owner.request("POST", "/auth/logout", data={"csrf_token": owner.csrf})
    assert done.status_code == 204, done.text
    assert owner.get("/auth/session").status_code == 401


def test_the_home_page_lists_the_users_organisations_projects_and_environments(
    owner: Browser, org: NewOrganisation
) -> None:
    page = owner.get("/dashboard/")
    assert page.status_code == 200
    assert "<h1>Your organisations</h1>" in page.text
    assert org.organisation.name in page.text
    for env in org.project.environments:
        assert f'href="/dashboard/envs/{env.id}/topics"' in page.text
