"""Errors on dashboard routes become HTML pages (or a trip to the login page), not JSON.

Status, code and message come from the API's own mapping (:mod:`control_plane.edge.errors`), so both
faces of QueueCore agree on what each error is; only the representation differs.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException

from control_plane.dashboard.pages import PREFIX, page, redirect
from control_plane.edge.errors import (
    handle_domain_error,
    handle_http,
    handle_unexpected,
    handle_validation,
)
from core.errors import QueueCoreError
from tenants.sessions import SessionRequired

TITLES = {
    400: "Bad request",
    401: "Sign in first",
    403: "Not allowed",
    404: "Not found",
    405: "Not allowed",
    409: "Conflict",
    422: "Check what you entered",
    429: "Too many requests",
    503: "Temporarily unavailable",
}
CSRF_MESSAGE = (
    "This form was not accepted: it has expired or did not come from this dashboard. "
    "Go back, reload the page and try again."
)


def api_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """The API's answer to ``exc`` (it logs server errors, with their trace, once)."""
    if isinstance(exc, QueueCoreError):
        return handle_domain_error(request, exc)
    if isinstance(exc, ValidationException):
        return handle_validation(request, exc)
    if isinstance(exc, HTTPException):
        return handle_http(request, exc)
    return handle_unexpected(request, exc)


def handle_page_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """An error page with the API's status and message; no session sends the user to sign in."""
    if isinstance(exc, SessionRequired):
        return _to_login(request)
    answer = api_error(request, exc)
    error = answer.content["error"]
    status = int(error["status"])
    message = CSRF_MESSAGE if error["code"] == "CSRF_FAILED" else error["message"]
    headers = {k: v for k, v in answer.headers.items() if k.lower() == "retry-after"}
    return page(
        request,
        "error.html",
        status=status,
        headers=headers,
        title=TITLES.get(status, "Something went wrong"),
        message=message,
        code=error["code"],
        request_id=error["requestId"],
    )


def _to_login(request: Request[Any, Any, Any]) -> Response[Any]:
    """To the login page, coming back here afterwards when this was a page (not a form post)."""
    if request.method == "GET":
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return redirect(f"{PREFIX}/login", next=target)
    return redirect(f"{PREFIX}/login", notice="session-ended")


PAGE_EXCEPTION_HANDLERS: dict[Any, Any] = {
    QueueCoreError: handle_page_error,
    ValidationException: handle_page_error,
    HTTPException: handle_page_error,
    Exception: handle_page_error,
}
