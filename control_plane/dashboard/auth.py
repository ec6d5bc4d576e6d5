"""Sign up, sign in and sign out: the dashboard's forms over the ``/auth`` session machinery.

The sign-in and sign-up forms are posted before any session exists, so their CSRF token is a
double-submit one: a random value in a ``SameSite=Strict`` cookie, echoed by the form.
"""

from __future__ import annotations

import hmac
import secrets
from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.connection import ASGIConnection
from litestar.datastructures import Cookie
from litestar.di import NamedDependency
from litestar.handlers.base import BaseRouteHandler
from litestar.response import Redirect

from control_plane.dashboard.pages import (
    PREFIX,
    current_session,
    env_path,
    field,
    form_fields,
    page,
    redirect,
    safe_next,
)
from control_plane.dashboard.sessions import (
    COOKIE_NAME,
    CSRF_FIELD,
    form_field,
    login_throttle_of,
    require_csrf,
    require_session,
    session_cookie,
    signup_throttle_of,
)
from control_plane.edge.bodies import SIGN_IN_FORM_MAX_BYTES
from control_plane.edge.errors import status_for
from control_plane.edge.request_id import request_id
from core import settings
from core.errors import ValidationFailed
from observability.logging import bind
from tenants import sessions
from tenants.errors import EmailTaken, InvalidCredentials
from tenants.identity import Identity
from tenants.login_throttle import TooManyLoginAttempts
from tenants.sessions import CsrfFailed, NewSession
from tenants.team.service import TeamService

TAKEN = (
    "An account with this email exists already: sign in, or reset its password from the "
    "sign-in page."
)
FORM_COOKIE = "qc_form_csrf"
FORM_TOKEN_BYTES = 32
MIN_FORM_TOKEN_CHARS, MAX_FORM_TOKEN_CHARS = 40, 64  # what form_token hands out (43)


def form_cookie(token: str) -> Cookie:
    """The pre-session CSRF cookie of the sign-in and sign-up forms."""
    return Cookie(
        key=FORM_COOKIE,
        value=token,
        path=PREFIX,
        httponly=True,
        samesite="strict",
        secure=settings.http().public_url.lower().startswith("https://"),
    )


def form_token(request: Request[Any, Any, Any]) -> str:
    """The browser's form token, or a new one when it has none."""
    token = request.cookies.get(FORM_COOKIE, "")
    fits = MIN_FORM_TOKEN_CHARS <= len(token) <= MAX_FORM_TOKEN_CHARS
    return token if fits else secrets.token_urlsafe(FORM_TOKEN_BYTES)


async def require_form_csrf(
    connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler | None = None
) -> None:
    """Guard: the form echoes the token of its cookie (403 ``CSRF_FAILED`` otherwise). The
    cookie is checked first: without one the body is never read, and with one it is read within
    the sign-in forms' small limit."""
    cookie = connection.cookies.get(FORM_COOKIE, "")
    if not MIN_FORM_TOKEN_CHARS <= len(cookie) <= MAX_FORM_TOKEN_CHARS:
        raise CsrfFailed
    posted = await form_field(connection, CSRF_FIELD, SIGN_IN_FORM_MAX_BYTES) or ""
    if not hmac.compare_digest(cookie.encode(), posted.encode()):
        raise CsrfFailed


def anonymous_form(
    request: Request[Any, Any, Any],
    template: str,
    *,
    status: int = 200,
    headers: dict[str, str] | None = None,
    **context: Any,
) -> Response[Any]:
    """The sign-in or sign-up page with its form token (in the page and in the cookie)."""
    token = form_token(request)
    return page(
        request,
        template,
        status=status,
        headers=headers,
        cookies=[form_cookie(token)],
        form_csrf=token,
        **context,
    )


def signed_in(opened: NewSession, target: str | Redirect) -> Response[Any]:
    """Where a new session goes (a path, or a redirect with its notice), carrying its cookie."""
    bind(user_id=opened.session.user_id)
    if isinstance(target, str):
        target = redirect(target)
    target.cookies.append(session_cookie(opened.token))
    return target


class AuthPages(Controller):
    """``/dashboard/login``, ``/dashboard/signup`` and ``/dashboard/logout``."""

    path = PREFIX
    include_in_schema = False

    @get("/login")
    async def login_page(self, request: Request[Any, Any, Any]) -> Response[Any]:
        """The sign-in form (the dashboard's home for a browser already signed in)."""
        if await _has_session(request):
            return redirect(safe_next(request.query_params.get("next")))
        return anonymous_form(
            request, "login.html", next=safe_next(request.query_params.get("next")), email=""
        )

    @post("/login", guards=[require_form_csrf])
    async def login(
        self, request: Request[Any, Any, Any], identity: NamedDependency[Identity]
    ) -> Response[Any]:
        """Open a session; a wrong pair or too many failures are explained on the form."""
        fields = await form_fields(request)
        email, target = field(fields, "email"), safe_next(field(fields, "next"))
        client_address = request.client.host if request.client else None
        try:
            opened = await identity.login(
                email,
                field(fields, "password", strip=False),
                login_throttle_of(request.app),
                client_address,
            )
        except (InvalidCredentials, TooManyLoginAttempts) as exc:
            return _login_refused(request, exc, email, target)
        return signed_in(opened, target)

    @get("/signup")
    async def signup_page(self, request: Request[Any, Any, Any]) -> Response[Any]:
        """The sign-up form (a page saying it is closed when the operator turned it off)."""
        if not settings.signup_open():
            return _signup_closed(request)
        return anonymous_form(request, "signup.html", name="", email="")

    @post("/signup", guards=[require_form_csrf])
    async def signup(
        self, request: Request[Any, Any, Any], team: NamedDependency[TeamService]
    ) -> Response[Any]:
        """A new organisation owned by a new user, who is signed in and lands in its development
        environment. A taken email is said so (sign-ups are throttled per email and address)."""
        if not settings.signup_open():
            return _signup_closed(request)
        fields = await form_fields(request)
        name, email = field(fields, "name"), field(fields, "email")
        client_address = request.client.host if request.client else None
        try:
            await signup_throttle_of(request.app).admit(email, client_address)
            made = await team.sign_up(name, email, field(fields, "password", strip=False))
        except TooManyLoginAttempts as exc:
            return _signup_throttled(request, int(exc.data["retry_after_s"]), name, email)
        except (ValidationFailed, EmailTaken) as exc:
            taken = isinstance(exc, EmailTaken)
            return anonymous_form(
                request,
                "signup.html",
                status=status_for(exc),
                error=TAKEN if taken else exc.message,
                name=name,
                email=email,
            )
        target = redirect(env_path(made.environment_id, "topics"), notice="welcome")
        return signed_in(made.session, target)

    @post("/logout", guards=[require_session, require_csrf])
    async def logout(
        self, request: Request[Any, Any, Any], identity: NamedDependency[Identity]
    ) -> Response[Any]:
        """End the session server-side; its cookie stops working at once."""
        await identity.logout(request.cookies.get(COOKIE_NAME, ""))
        return redirect(
            f"{PREFIX}/login", notice="signed-out", cookies=[session_cookie("", max_age_s=0)]
        )


def _signup_closed(request: Request[Any, Any, Any]) -> Response[Any]:
    return page(
        request,
        "error.html",
        status=403,
        title="Sign-up is closed",
        message="This QueueCore server does not take new sign-ups. Ask an owner or admin of an "
        "organisation to invite you: the invitation email has a link to join.",
        code="SIGNUP_CLOSED",
        request_id=request_id(request.scope),
    )


def _signup_throttled(
    request: Request[Any, Any, Any], retry_after_s: int, name: str, email: str
) -> Response[Any]:
    return anonymous_form(
        request,
        "signup.html",
        status=429,
        error=f"Too many sign-up attempts. Try again in {retry_after_s} seconds.",
        name=name,
        email=email,
        headers={"Retry-After": str(retry_after_s)},
    )


def _login_refused(
    request: Request[Any, Any, Any], exc: Exception, email: str, target: str
) -> Response[Any]:
    if isinstance(exc, TooManyLoginAttempts):
        retry_after_s = int(exc.data["retry_after_s"])
        return anonymous_form(
            request,
            "login.html",
            status=429,
            error=f"Too many failed sign-in attempts. Try again in {retry_after_s} seconds.",
            email=email,
            next=target,
            headers={"Retry-After": str(retry_after_s)},
        )
    return anonymous_form(
        request,
        "login.html",
        status=401,
        error="Email or password is incorrect.",
        email=email,
        next=target,
    )


async def _has_session(request: Request[Any, Any, Any]) -> bool:
    """Whether the browser's session cookie names a live session."""
    if current_session(request) is not None:
        return True
    try:
        await require_session(request)
    except sessions.SessionRequired:
        return False
    return True
