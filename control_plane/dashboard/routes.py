"""The dashboard's routes: its pages behind one router, its static files, and ``/``."""

from __future__ import annotations

from litestar import Router
from litestar.static_files import create_static_files_router
from litestar.types import ControllerRouterHandler

from control_plane.dashboard.accounts import AccountPages
from control_plane.dashboard.alerts import AlertPages
from control_plane.dashboard.auth import AuthPages
from control_plane.dashboard.dlq import DeadLetterPages
from control_plane.dashboard.errors import PAGE_EXCEPTION_HANDLERS
from control_plane.dashboard.fair_pages import ConfigPages, FairPages
from control_plane.dashboard.home import HomePages, root
from control_plane.dashboard.invoices import InvoicePages
from control_plane.dashboard.keys import KeyPages
from control_plane.dashboard.message_pages import MessagePages
from control_plane.dashboard.pages import PREFIX, STATIC
from control_plane.dashboard.push import PushPages
from control_plane.dashboard.team import TeamPages
from control_plane.dashboard.topic_admin import TopicAdminPages
from control_plane.dashboard.topics import TopicPages
from control_plane.dashboard.usage import UsagePages


def dashboard_route_handlers() -> list[ControllerRouterHandler]:
    """The pages (with HTML error pages), ``/dashboard/static`` and ``/``."""
    pages = Router(
        path="/",
        route_handlers=[
            AuthPages,
            AccountPages,
            HomePages,
            TeamPages,
            KeyPages,
            TopicPages,
            TopicAdminPages,
            PushPages,
            DeadLetterPages,
            AlertPages,
            UsagePages,
            MessagePages,
            InvoicePages,
            FairPages,
            ConfigPages,
        ],
        exception_handlers=PAGE_EXCEPTION_HANDLERS,
        include_in_schema=False,
    )
    static = create_static_files_router(
        path=f"{PREFIX}/static", directories=[STATIC], include_in_schema=False
    )
    return [pages, static, root]
