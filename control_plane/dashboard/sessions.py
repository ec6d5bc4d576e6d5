"""``/auth``: dashboard login, current session and logout, with cookie sessions and CSRF.

Not under ``/v1`` and not authenticated by API key. Dashboard routes protect themselves with the
:func:`require_session` guard (and :func:`require_csrf` for unsafe methods: the token in the
``X-CSRF-Token`` header, or in the ``csrf_token`` field of an HTML form) and read the caller
with :func:`session_of`. Logins are throttled per account and per client address
(``tenants.login_throttle``): over the limit they end as ``429 RATE_LIMIT_EXCEEDED`` with
``Retry-After``, the password unchecked.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Controller, Litestar, Request, Response, get, post
from litestar.connection import ASGIConnection
from litestar.datastructures import Cookie
from litestar.di import NamedDependency
from litestar.handlers.base import BaseRouteHandler
from litestar.params import Body

from control_plane.edge.bodies import FORM_MAX_BYTES, FORM_TYPE, read_form
from control_plane.edge.resources import identity_of, resources_of
from core import settings
from core.wire_types import Text
from observability.logging import bind
from tenants import sessions
from tenants.identity import Identity
from tenants.login_throttle import LoginThrottle, ThrottlePolicy
from tenants.sessions import SESSION_TTL_S, CsrfFailed, Session, SessionRequired

COOKIE_NAME = "qc_session"
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf_token"  # the hidden field of the dashboard's HTML forms
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
_STATE_KEY = "qc_session"
_THROTTLE_STATE = "login_throttle"


class LoginRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``POST /auth/login``."""

    email: Annotated[Text, msgspec.Meta(max_length=320)]
    password: Annotated[Text, msgspec.Meta(max_length=sessions.MAX_PASSWORD_LENGTH)]


class UserView(msgspec.Struct, rename="camel"):
    """The signed-in user."""

    id: str
    email: str


class MembershipView(msgspec.Struct, rename="camel"):
    """An organisation the user belongs to, and their role there."""

    id: str
    name: str
    role: str


class SessionView(msgspec.Struct, rename="camel"):
    """What the dashboard knows about its user, and the CSRF token for unsafe requests."""

    user: UserView
    organisations: list[MembershipView]
    csrf_token: str

    @classmethod
    def of(cls, session: Session) -> SessionView:
        """Render a session."""
        return cls(
            user=UserView(id=session.user_id, email=session.email),
            organisations=[
                MembershipView(id=m.organisation_id, name=m.organisation_name, role=m.role)
                for m in session.memberships
            ],
            csrf_token=session.csrf_token,
        )


def session_cookie(token: str, max_age_s: int = SESSION_TTL_S) -> Cookie:
    """The session cookie: HttpOnly, SameSite=Lax, Secure when the public URL is https."""
    return Cookie(
        key=COOKIE_NAME,
        value=token,
        max_age=max_age_s,
        path="/",
        httponly=True,
        samesite="lax",
        secure=settings.http().public_url.lower().startswith("https://"),
    )


async def require_session(
    connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler | None = None
) -> None:
    """Guard: the request carries a live session cookie (401 ``UNAUTHORIZED`` otherwise)."""
    state = connection.scope.setdefault("state", {})
    if isinstance(state.get(_STATE_KEY), Session):
        return
    session = await identity_of(connection.app).session(connection.cookies.get(COOKIE_NAME))
    state[_STATE_KEY] = session
    bind(user_id=session.user_id)


async def require_csrf(
    connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler | None = None
) -> None:
    """Guard: unsafe methods echo the session's CSRF token in ``X-CSRF-Token``, or an HTML form
    posts it in its ``csrf_token`` field (403 otherwise)."""
    if connection.scope.get("method", "GET") in SAFE_METHODS:
        return
    await require_session(connection, handler)
    presented = connection.headers.get(CSRF_HEADER) or await form_field(connection, CSRF_FIELD)
    if not session_of(connection).csrf_matches(presented):
        raise CsrfFailed


async def form_field(
    connection: ASGIConnection[Any, Any, Any, Any], name: str, max_bytes: int = FORM_MAX_BYTES
) -> str | None:
    """A field of a form-encoded request body (None for any other body), read within
    ``max_bytes`` (:func:`control_plane.edge.bodies.read_form`, which keeps the form for the handler).
    """
    if not isinstance(connection, Request) or connection.content_type[0] != FORM_TYPE:
        return None
    values = (await read_form(connection, max_bytes)).get(name)
    return values[0] if values else None


def session_of(connection: ASGIConnection[Any, Any, Any, Any]) -> Session:
    """The session resolved by :func:`require_session`."""
    session = connection.scope.get("state", {}).get(_STATE_KEY)
    if not isinstance(session, Session):
        raise SessionRequired
    return session


SIGNUP_POLICY = ThrottlePolicy(  # every sign-up counts: 5 an hour per email, 20 per address
    max_failures_per_account_and_address=5,
    max_failures_per_address=20,
    window_ms=3600 * 1000,
    max_failures_per_account=5,
    account_window_ms=3600 * 1000,
)
_SIGNUP_THROTTLE_STATE = "signup_throttle"


def signup_throttle_of(app: Litestar) -> LoginThrottle:
    """The process's sign-up throttle: every attempt counts, per email and per client address
    (:data:`SIGNUP_POLICY`); tests may set ``app.state.signup_throttle`` first."""
    throttle = app.state.get(_SIGNUP_THROTTLE_STATE)
    if not isinstance(throttle, LoginThrottle):
        throttle = LoginThrottle(
            resources_of(app).redis, SIGNUP_POLICY, key_prefix="qc:signup:{throttle}"
        )
        app.state[_SIGNUP_THROTTLE_STATE] = throttle
    return throttle


_RESET_THROTTLE_STATE = "reset_throttle"


def reset_throttle_of(app: Litestar) -> LoginThrottle:
    """The process's throttle of password reset requests: every request counts, per email and
    per client address (:data:`SIGNUP_POLICY`), so nobody floods an inbox with links."""
    throttle = app.state.get(_RESET_THROTTLE_STATE)
    if not isinstance(throttle, LoginThrottle):
        throttle = LoginThrottle(
            resources_of(app).redis, SIGNUP_POLICY, key_prefix="qc:reset:{throttle}"
        )
        app.state[_RESET_THROTTLE_STATE] = throttle
    return throttle


def login_throttle_of(app: Litestar) -> LoginThrottle:
    """The process's login throttle on its shared Redis client, made on first use.

    Whoever builds the app may set ``app.state.login_throttle`` first (tests use shorter windows).
    """
    throttle = app.state.get(_THROTTLE_STATE)
    if not isinstance(throttle, LoginThrottle):
        throttle = LoginThrottle(resources_of(app).redis)
        app.state[_THROTTLE_STATE] = throttle
    return throttle


class SessionController(Controller):
    """Sign in and out of the dashboard."""

    path = "/auth"
    tags = ["dashboard sessions"]

    @post("/login", status_code=200, summary="Sign in with email and password")
    async def login(
        self,
        request: Request[Any, Any, Any],
        identity: NamedDependency[Identity],
        data: Annotated[LoginRequest, Body()],
    ) -> Response[SessionView]:
        """Sets the ``qc_session`` cookie; 401 ``INVALID_CREDENTIALS`` for any wrong pair.

        429 ``RATE_LIMIT_EXCEEDED`` with ``Retry-After`` after too many recent failures for the
        account or from the client's address, whatever the password.
        """
        throttle = login_throttle_of(request.app)
        client_address = request.client.host if request.client else None
        opened = await identity.login(data.email, data.password, throttle, client_address)
        bind(user_id=opened.session.user_id)
        return Response(SessionView.of(opened.session), cookies=[session_cookie(opened.token)])

    @get("/session", guards=[require_session], summary="The signed-in user and their CSRF token")
    async def current(self, request: Request[Any, Any, Any]) -> SessionView:
        """401 ``UNAUTHORIZED`` without a live session."""
        return SessionView.of(session_of(request))

    @post(
        "/logout",
        status_code=204,
        guards=[require_session, require_csrf],
        summary="Sign out: ends the session server-side",
    )
    async def logout(
        self, request: Request[Any, Any, Any], identity: NamedDependency[Identity]
    ) -> Response[None]:
        """Needs ``X-CSRF-Token``; the old cookie stops working at once."""
        await identity.logout(request.cookies.get(COOKIE_NAME, ""))
        return Response(None, status_code=204, cookies=[session_cookie("", max_age_s=0)])
