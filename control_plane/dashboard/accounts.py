"""The pages emailed links open, before anyone is signed in: accepting an invitation and
choosing a new password, and the form that asks for a password reset link.

Their forms carry the pre-session CSRF token of the sign-in form. Links are valid once; a used,
replaced or expired one is a 404 page that says so. Accepting and resetting sign the user in.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath

from control_plane.dashboard.auth import anonymous_form, require_form_csrf, signed_in
from control_plane.dashboard.pages import PREFIX, field, form_fields, redirect
from control_plane.dashboard.sessions import login_throttle_of, reset_throttle_of
from control_plane.edge.errors import status_for
from core.errors import ValidationFailed
from tenants.errors import EmailTaken, InvalidCredentials
from tenants.login_throttle import TooManyLoginAttempts
from tenants.team.emails import INVITATION_PATH, RESET_PATH
from tenants.team.service import TeamService

NO_STORE = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}


def _client(request: Request[Any, Any, Any]) -> str | None:
    return request.client.host if request.client else None


class AccountPages(Controller):
    """``/dashboard/invites/{token}``, ``/dashboard/reset`` and ``/dashboard/reset/{token}``."""

    path = PREFIX
    include_in_schema = False

    @get(INVITATION_PATH.removeprefix(PREFIX) + "{token:str}")
    async def invitation(
        self,
        request: Request[Any, Any, Any],
        team: NamedDependency[TeamService],
        token: FromPath[str],
    ) -> Response[Any]:
        """What the invitation is for, and the form that accepts it."""
        found = await team.invitation(token)
        return anonymous_form(request, "invitation.html", invitation=found, headers=NO_STORE)

    @post(INVITATION_PATH.removeprefix(PREFIX) + "{token:str}", guards=[require_form_csrf])
    async def accept(
        self,
        request: Request[Any, Any, Any],
        team: NamedDependency[TeamService],
        token: FromPath[str],
    ) -> Response[Any]:
        """Join with a new account (or the address's existing one), signed in."""
        found = await team.invitation(token)
        password = field(await form_fields(request), "password", strip=False)
        try:
            if found.has_account:  # a password check: throttled like signing in
                async with login_throttle_of(request.app).attempt(found.email, _client(request)):
                    opened = await team.accept_invitation(token, password)
            else:
                opened = await team.accept_invitation(token, password)
        except (ValidationFailed, InvalidCredentials, EmailTaken, TooManyLoginAttempts) as exc:
            return anonymous_form(
                request,
                "invitation.html",
                status=status_for(exc),
                error=_accept_problem(exc),
                invitation=found,
                headers=NO_STORE,
            )
        return signed_in(opened, redirect(f"{PREFIX}/", notice="joined"))

    @get("/reset")
    async def reset_request_page(self, request: Request[Any, Any, Any]) -> Response[Any]:
        """The form that asks for a reset link."""
        return anonymous_form(request, "reset_request.html", email="")

    @post("/reset", guards=[require_form_csrf])
    async def reset_request(
        self, request: Request[Any, Any, Any], team: NamedDependency[TeamService]
    ) -> Response[Any]:
        """Email a link when the address has an account; the same answer either way."""
        email = field(await form_fields(request), "email")
        try:
            await reset_throttle_of(request.app).admit(email, _client(request))
        except TooManyLoginAttempts as exc:
            wait_s = int(exc.data["retry_after_s"])
            return anonymous_form(
                request,
                "reset_request.html",
                status=429,
                error=f"Too many reset requests. Try again in {wait_s} seconds.",
                email=email,
                headers={"Retry-After": str(wait_s)},
            )
        await team.request_password_reset(email)
        return redirect(f"{PREFIX}/login", notice="reset-sent")

    @get(RESET_PATH.removeprefix(PREFIX) + "{token:str}")
    async def reset_page(
        self,
        request: Request[Any, Any, Any],
        team: NamedDependency[TeamService],
        token: FromPath[str],
    ) -> Response[Any]:
        """The new-password form of a live link."""
        email = await team.reset_email(token)
        return anonymous_form(request, "reset.html", email=email, headers=NO_STORE)

    @post(RESET_PATH.removeprefix(PREFIX) + "{token:str}", guards=[require_form_csrf])
    async def reset(
        self,
        request: Request[Any, Any, Any],
        team: NamedDependency[TeamService],
        token: FromPath[str],
    ) -> Response[Any]:
        """Set the password (the link is used up), sign out everywhere else, sign in here."""
        email = await team.reset_email(token)
        password = field(await form_fields(request), "password", strip=False)
        try:
            opened = await team.reset_password(token, password)
        except ValidationFailed as exc:
            return anonymous_form(
                request,
                "reset.html",
                status=status_for(exc),
                error=exc.message,
                email=email,
                headers=NO_STORE,
            )
        return signed_in(opened, redirect(f"{PREFIX}/", notice="password-reset"))


def _accept_problem(exc: Exception) -> str:
    if isinstance(exc, InvalidCredentials):
        return (
            "That is not the password of this account. Forgot it? Reset it from the sign-in page."
        )
    if isinstance(exc, TooManyLoginAttempts):
        return f"Too many failed attempts. Try again in {exc.data['retry_after_s']} seconds."
    if isinstance(exc, EmailTaken):
        return "An account with this email was just created: sign in with it, then open the link again."
    return str(getattr(exc, "message", exc))
