"""Driving the dashboard over HTTP as a browser would: cookies, forms with their CSRF field."""

from __future__ import annotations

import html
import re
import secrets
from dataclasses import dataclass
from typing import Any

import httpx
from litestar.testing import TestClient

from tenants import service as tenants
from tenants.models import NewOrganisation
from tests.support.tenancy import run_in_tx

PASSWORD = "correct-horse-battery"  # tests.support.tenancy gives every owner this one
_CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]*)"')


def csrf_field(page: str) -> str:
    """The CSRF token a page's forms post."""
    match = _CSRF_FIELD.search(page)
    assert match, "no form with a csrf_token on the page"
    return html.unescape(match.group(1))


def text_of(response: httpx.Response) -> str:
    """A page's HTML with entities decoded, for assertions on what a user reads."""
    return html.unescape(response.text)


class Browser:
    """One browser: its own cookie jar over the shared in-process client; no redirects followed."""

    def __init__(self, client: TestClient) -> None:
        self.client = client
        self.jar = httpx.Cookies()
        self.csrf = ""

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Send with this browser's cookies and keep the ones the answer sets."""
        self.client.cookies = self.jar
        try:
            response = self.client.request(method, path, follow_redirects=False, **kwargs)
        finally:
            self.jar = httpx.Cookies(self.client.cookies)
            self.client.cookies = httpx.Cookies()
        if 'name="csrf_token"' in response.text and "/logout" in response.text:
            self.csrf = csrf_field(response.text)
        return response

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        """A page."""
        return self.request("GET", path, **kwargs)

    def post(self, path: str, data: dict[str, Any] | None = None, **kwargs: Any) -> httpx.Response:
        """A form post carrying the session's CSRF token (unless ``data`` sets its own)."""
        return self.request("POST", path, data={"csrf_token": self.csrf, **(data or {})}, **kwargs)

    def post_without_csrf(self, path: str, data: dict[str, Any] | None = None) -> httpx.Response:
        """A form post as a forged cross-site form would send it: no token."""
        return self.request("POST", path, data=data or {})

    def anonymous_form(self, page: str, path: str, data: dict[str, Any]) -> httpx.Response:
        """Open a sign-in or sign-up page, then post its form."""
        opened = self.get(page)
        assert opened.status_code == 200, opened.text
        return self.request("POST", path, data={"csrf_token": csrf_field(opened.text), **data})

    def login(self, email: str, password: str = PASSWORD, **extra: str) -> httpx.Response:
        """Sign in through the login form; then load a page to learn the session's CSRF token."""
        data = {"email": email, "password": password, **extra}
        response = self.anonymous_form("/dashboard/login", "/dashboard/login", data)
        if response.status_code == 303:
            assert self.get("/dashboard/").status_code == 200
        return response

    def signup(self, name: str, email: str, password: str = PASSWORD) -> httpx.Response:
        """Create an account through the sign-up form."""
        data = {"name": name, "email": email, "password": password}
        return self.anonymous_form("/dashboard/signup", "/dashboard/signup", data)


@dataclass(frozen=True)
class Member:
    """A user with a role in an organisation."""

    email: str
    role: str


def add_member(database_url: str, org: NewOrganisation, role: str) -> Member:
    """A new user with ``role`` in ``org`` (password :data:`PASSWORD`)."""
    email = f"{role}-{secrets.token_hex(4)}@example.com"

    async def work(conn: Any) -> None:
        user_id = await tenants.create_user(conn, email, PASSWORD)
        await tenants.add_member(conn, org.organisation.id, user_id, role)

    run_in_tx(database_url, work)
    return Member(email, role)


def env_url(org: NewOrganisation, environment: str, *parts: str) -> str:
    """``/dashboard/envs/{id}/…`` of one of the organisation's default environments."""
    return "/".join(["/dashboard/envs", org.project.environment(environment).id, *parts])


def redirect_target(response: httpx.Response) -> str:
    """Where a 303 goes."""
    assert response.status_code == 303, (response.status_code, response.text)
    return response.headers["location"]
