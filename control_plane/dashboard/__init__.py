"""The tenant web dashboard: server-rendered pages under ``/dashboard`` on cookie sessions.

Sign-up, sign-in, an environment switcher, and per environment its API keys, topics, consumer
groups (with their lag), dead-letter queues and alert endpoint. Pages call the same domain
services as the ``/v1`` API; what a user may do follows their role (``tenants.access``).
"""

from control_plane.dashboard.pages import dashboard_templates
from control_plane.dashboard.routes import dashboard_route_handlers

__all__ = ["dashboard_route_handlers", "dashboard_templates"]
