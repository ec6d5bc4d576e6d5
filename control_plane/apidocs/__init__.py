"""``/schema``: the interactive API docs, rendered from assets shipped inside this package.

Swagger UI (``vendor/swagger-ui``, a pinned copy of npm's ``swagger-ui-dist``; its ``VERSION``
file names the version and the files' hashes) is served from ``/schema/assets``, so the page
works offline and behind an air gap: the browser asks nothing of any other host. Every response
carries framing headers (:func:`add_framing_headers`), the docs pages a policy of their own.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from litestar import Request
from litestar.openapi.plugins import OpenAPIRenderPlugin
from litestar.router import Router
from litestar.static_files import create_static_files_router
from litestar.types import Message, Scope

VENDOR = Path(__file__).parent / "vendor" / "swagger-ui"
STATIC = Path(__file__).parent / "static"
ASSETS_PATH = "/assets"
SCHEMA_PATH = "/schema"

# The docs page runs Swagger UI's script and its own start-up file from this origin; Swagger UI
# sets inline styles and draws icons from data: URLs. Nothing may frame any page.
DOCS_POLICY = (
    b"default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    b"img-src 'self' data:; font-src 'self' data:; connect-src 'self'; "
    b"form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
)
FRAMING_POLICY = b"frame-ancestors 'none'"
_X_FRAME = (b"x-frame-options", b"DENY")


class OfflineSwaggerPlugin(OpenAPIRenderPlugin):
    """Swagger UI at ``/schema`` and ``/schema/swagger``, its scripts and styles served locally."""

    def __init__(self, title: str) -> None:
        super().__init__(path=["/swagger"], favicon="", style="")
        self.title = title

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        """The page: Swagger UI pointed at this server's ``openapi.json``."""
        assets = f"{SCHEMA_PATH}{ASSETS_PATH}"
        spec_url = html.escape(self.get_openapi_json_route(request), quote=True)
        return f"""<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>{html.escape(self.title)}</title>
  <link rel="stylesheet" href="{assets}/swagger-ui.css">
  <link rel="stylesheet" href="{assets}/docs.css">
</head>
<body>
  <div id="swagger-ui" data-spec-url="{spec_url}"></div>
  <script src="{assets}/swagger-ui-bundle.js"></script>
  <script src="{assets}/docs.js"></script>
</body>
</html>
""".encode()

    def receive_router(self, router: Router) -> None:
        """Serve the vendored assets and the start-up script beside the pages."""
        router.register(
            create_static_files_router(
                path=ASSETS_PATH, directories=[STATIC, VENDOR], include_in_schema=False
            )
        )


async def add_framing_headers(message: Message, scope: Scope) -> None:
    """``before_send`` hook: no response may be framed by another site (``X-Frame-Options`` and
    CSP ``frame-ancestors``), unless its handler set a policy of its own; the docs pages get
    :data:`DOCS_POLICY`."""
    if message["type"] != "http.response.start":
        return
    headers = list(message.get("headers", ()))
    names = {bytes(name).lower() for name, _ in headers}
    if b"x-frame-options" not in names:
        headers.append(_X_FRAME)
    if b"content-security-policy" not in names:
        headers.append((b"content-security-policy", _policy_for(scope.get("path", ""))))
    message["headers"] = headers


def _policy_for(path: str) -> bytes:
    if path.startswith(SCHEMA_PATH) and not path.endswith((".json", ".yaml", ".yml")):
        return DOCS_POLICY
    return FRAMING_POLICY
