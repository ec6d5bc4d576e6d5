"""HTTP traces and metrics through Litestar's OpenTelemetry plugin, when telemetry is on.

The plugin's middleware wraps the router, so it starts the server span before routing: span
names and the ``http.route`` attribute of ``http.server.request.duration`` come from
:func:`route_details`, which asks the router for the route *template* (the router caches the
answer, and the routing that follows hits that cache). The raw path would make a series per
topic, group and member. Unrouted requests (404, 405) have no route: their span is named by the
method alone. Every server span carries the request's ``request_id``.
"""

from __future__ import annotations

from typing import Any, cast

from litestar.plugins.opentelemetry import OpenTelemetryConfig, OpenTelemetryPlugin
from litestar.utils import normalize_path
from opentelemetry import metrics
from opentelemetry.metrics import Histogram, Meter, NoOpHistogram, UpDownCounter
from opentelemetry.semconv.attributes.http_attributes import HTTP_ROUTE
from opentelemetry.semconv.attributes.url_attributes import URL_PATH, URL_QUERY
from opentelemetry.semconv.metrics.http_metrics import HTTP_SERVER_REQUEST_DURATION
from opentelemetry.trace import Span

from control_plane.edge.request_id import request_id
from observability import telemetry
from observability.logging import redact

REQUEST_ID_ATTRIBUTE = "request_id"
# Probes hit these every few seconds: spans and latency series of no interest.
EXCLUDED_PATHS = ["^/healthz$", "^/readyz$"]


def route_template(scope: Any) -> str | None:
    """The template of the route ``scope`` will be routed to, or None when none matches."""
    app, path = scope.get("app"), scope.get("path", "")
    if app is None:
        return None
    if root_path := scope.get("root_path", ""):
        path = path.split(root_path, maxsplit=1)[-1]
    try:
        routed = app.asgi_router.handle_routing(
            path=normalize_path(path), method=scope.get("method")
        )
    except Exception:  # not found, method not allowed: the router answers that itself
        return None
    return str(routed[-1]) or None


def route_details(scope: Any) -> tuple[str, dict[str, str]]:
    """Span name and attributes: ``POST /v1/topics/{topic}/messages``, never the raw path."""
    method = str(scope.get("method") or "WEBSOCKET")
    template = route_template(scope)
    if template is None:
        return method, {}
    return f"{method} {template}", {HTTP_ROUTE: template}


def tag_request_id(span: Span, scope: dict[str, Any]) -> None:
    """Server-request hook: the span carries the id the response and the logs carry.

    It also masks an API key pasted into a URL and the token of an invitation or password
    reset link (the logs do the same): the instrumentation records the raw path and query
    string.
    """
    span.set_attribute(REQUEST_ID_ATTRIBUTE, request_id(scope))
    path = scope.get("path", "")
    if "_sk_" in path or "qc_" in path:  # an API key, an invitation or reset link's token
        span.set_attribute(URL_PATH, redact(path))
    query = scope.get("query_string", b"")
    if b"_sk_" in query:
        span.set_attribute(URL_QUERY, redact(bytes(query).decode("latin-1")))


class HttpMeter:
    """The instrumentation's meter, keeping ``http.server.request.duration`` and
    ``http.server.active_requests`` only: its request and response body-size histograms would
    cost two more records per request (~25 µs), and the publish counters already count bytes."""

    def __init__(self, meter: Meter) -> None:
        self._meter = meter

    def create_histogram(self, name: str, *args: Any, **kwargs: Any) -> Histogram:
        """The request duration histogram; a no-op for any other."""
        if name == HTTP_SERVER_REQUEST_DURATION:
            return self._meter.create_histogram(name, *args, **kwargs)
        return NoOpHistogram(name)

    def create_up_down_counter(self, *args: Any, **kwargs: Any) -> UpDownCounter:
        """``http.server.active_requests``."""
        return self._meter.create_up_down_counter(*args, **kwargs)


def tracing_plugins() -> list[OpenTelemetryPlugin]:
    """The OpenTelemetry plugin when this process exports telemetry; nothing otherwise."""
    if not telemetry.enabled():
        return []
    config = OpenTelemetryConfig(
        scope_span_details_extractor=route_details,
        server_request_hook_handler=tag_request_id,
        exclude_spans=["receive", "send"],  # a span per ASGI message: per SSE event
        exclude=EXCLUDED_PATHS,
        meter=cast(Meter, HttpMeter(metrics.get_meter("opentelemetry.instrumentation.asgi"))),
    )
    return [OpenTelemetryPlugin(config)]
