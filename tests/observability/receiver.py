"""A local OTLP/HTTP receiver: records every export request and decodes its protobuf body.

It answers where GreptimeDB does (``<base>/v1/metrics``, ``/v1/logs``, ``/v1/traces`` under
``/v1/otlp``) and keeps the raw request too, so tests can check the path, the headers and that no
secret appears in any body.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

BASE_PATH = "/v1/otlp"
_DECODERS: dict[str, tuple[type[Message], type[Message]]] = {
    "metrics": (ExportMetricsServiceRequest, ExportMetricsServiceResponse),
    "logs": (ExportLogsServiceRequest, ExportLogsServiceResponse),
    "traces": (ExportTraceServiceRequest, ExportTraceServiceResponse),
}


@dataclass
class Export:
    """One export request as received."""

    path: str
    signal: str | None  # metrics, logs or traces; None for a path GreptimeDB does not serve
    headers: dict[str, str]  # lower-case names
    body: bytes
    decoded: Any


def value_of(value: AnyValue) -> Any:
    """A protobuf ``AnyValue`` as Python."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value_of(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes_of(value.kvlist_value.values)
    return getattr(value, kind)


def attributes_of(pairs: Any) -> dict[str, Any]:
    """Protobuf ``KeyValue`` pairs as a dict."""
    return {pair.key: value_of(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


class OtlpReceiver:
    """An HTTP server on 127.0.0.1 in a thread; :attr:`exports` is what it got, in order."""

    def __init__(self) -> None:
        self.exports: list[Export] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                receiver._record(self.path, dict(self.headers.items()), body)
                signal = _signal(self.path)
                response = b"" if signal is None else _DECODERS[signal][1]().SerializeToString()
                self.send_response(200 if signal else 404)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(response)))
                self.end_headers()
                self.wfile.write(response)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """What ``QUEUECORE_OTLP_ENDPOINT`` should be (GreptimeDB's shape)."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}{BASE_PATH}"

    def start(self) -> OtlpReceiver:
        """Serve in the background."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def _record(self, path: str, headers: dict[str, str], body: bytes) -> None:
        signal = _signal(path)
        decoded = None
        if signal is not None:
            decoded = _DECODERS[signal][0]()
            decoded.ParseFromString(body)
        lowered = {name.lower(): value for name, value in headers.items()}
        with self._lock:
            self.exports.append(Export(path, signal, lowered, body, decoded))

    def of(self, signal: str) -> list[Export]:
        """The exports of one signal so far."""
        with self._lock:
            return [export for export in self.exports if export.signal == signal]

    # --- metrics ------------------------------------------------------------------------------

    def metric_points(self, name: str) -> Iterator[tuple[dict[str, Any], dict[str, Any], Any]]:
        """``(resource attributes, point attributes, point)`` of every export of metric ``name``."""
        for export in self.of("metrics"):
            for resource_metrics in export.decoded.resource_metrics:
                resource = attributes_of(resource_metrics.resource.attributes)
                for scope in resource_metrics.scope_metrics:
                    for metric in scope.metrics:
                        if metric.name != name:
                            continue
                        data = getattr(metric, metric.WhichOneof("data"))
                        for point in data.data_points:
                            yield resource, attributes_of(point.attributes), point

    def metric_names(self) -> set[str]:
        """Every metric name exported so far."""
        return {
            metric.name
            for export in self.of("metrics")
            for resource_metrics in export.decoded.resource_metrics
            for scope in resource_metrics.scope_metrics
            for metric in scope.metrics
        }

    def latest(self, name: str, **attributes: Any) -> dict[tuple[str, tuple[Any, ...]], Any]:
        """The last exported (cumulative) point of each series of ``name`` matching ``attributes``,
        keyed by (service.instance.id, sorted point attributes)."""
        found: dict[tuple[str, tuple[Any, ...]], Any] = {}
        for resource, point_attributes, point in self.metric_points(name):
            if all(point_attributes.get(k) == v for k, v in attributes.items()):
                key = (
                    str(resource.get("service.instance.id")),
                    tuple(sorted(point_attributes.items())),
                )
                found[key] = point
        return found

    def total(self, name: str, **attributes: Any) -> float:
        """Sum over matching series of the latest cumulative value (a counter's ``as_int`` or
        ``as_double``, a histogram's ``count``)."""
        total = 0.0
        for point in self.latest(name, **attributes).values():
            if hasattr(point, "bucket_counts"):
                total += point.count
            else:
                total += point.as_int if point.WhichOneof("value") == "as_int" else point.as_double
        return total

    # --- logs and spans -----------------------------------------------------------------------

    def log_records(self) -> list[tuple[dict[str, Any], Any]]:
        """``(attributes, record)`` of every exported log record."""
        return [
            (attributes_of(record.attributes), record)
            for export in self.of("logs")
            for resource_logs in export.decoded.resource_logs
            for scope in resource_logs.scope_logs
            for record in scope.log_records
        ]

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """``(attributes, span)`` of every exported span."""
        return [
            (attributes_of(span.attributes), span)
            for export in self.of("traces")
            for resource_spans in export.decoded.resource_spans
            for scope in resource_spans.scope_spans
            for span in scope.spans
        ]


def _signal(path: str) -> str | None:
    for signal in _DECODERS:
        if path == f"{BASE_PATH}/v1/{signal}":
            return signal
    return None


def eventually(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``check`` until true; fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout_s}s: {what}")
