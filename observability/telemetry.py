"""OpenTelemetry set-up: traces, metrics and logs exported over OTLP/HTTP (GreptimeDB ``/v1/otlp``).

:func:`setup` is called once per process that does work, after any fork: ``queuecore serve``'s
server workers (``control_plane.app.create_server_app``), each Celery prefork child
(``worker_process_init``) and ``queuecore beat``. With no ``QUEUECORE_OTLP_ENDPOINT`` it does
nothing at all: the metric catalogue's instruments stay the API's no-op proxies, no tracing
middleware is installed and no log handler is added, so nothing is sent anywhere.

With an endpoint, the three signals go to ``<endpoint>/v1/metrics``, ``/v1/logs`` and
``/v1/traces`` with the configured headers (GreptimeDB's ``X-Greptime-DB-Name`` and Basic
``Authorization``; per-signal extras such as the trace pipeline header, see
:class:`core.settings.TelemetrySettings`). Every log line of the process is also a log record
there, with the fields bound by structlog (``request_id``, organisation, project, environment,
task) as attributes, already masked by :func:`observability.logging.redact_secrets`, and the
current span's trace and span ids. :func:`shutdown` flushes all three; it runs on application
shutdown, on Celery's ``worker_process_shutdown`` and at interpreter exit.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import structlog
from opentelemetry import metrics, propagate, trace
from opentelemetry._logs import Logger, SeverityNumber
from opentelemetry.context import Context, get_current
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.propagators.textmap import (
    CarrierT,
    Getter,
    Setter,
    TextMapPropagator,
    default_getter,
    default_setter,
)
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from core.settings import TelemetrySettings
from observability import logging as qc_logging

ROLES = ("api", "worker", "beat", "pusher")
EXPORT_TIMEOUT_S = 5.0  # per request; the exporters retry within it
SHUTDOWN_TIMEOUT_MS = 5_000
MAX_BATCH_DELAY_MS = 5_000  # logs and spans wait at most this long (metrics: the interval)
# The HTTP instrumentation's stable conventions: ``http.server.request.duration`` labelled with
# the route template. The older ones add ``http.target``, the raw path: a series per topic,
# group and member.
SEMCONV_OPT_IN = "http"


@dataclass
class _Telemetry:
    """The providers of this process and the log handler feeding the logger provider."""

    meter_provider: MeterProvider
    tracer_provider: TracerProvider
    logger_provider: LoggerProvider
    handler: logging.Handler
    pid: int


_active: _Telemetry | None = None
_lock = threading.Lock()


class IgnoreIncomingContext(TextMapPropagator):
    """A propagator that reads and writes nothing: requests start their own traces."""

    def extract(
        self,
        carrier: CarrierT,
        context: Context | None = None,
        getter: Getter[CarrierT] = default_getter,
    ) -> Context:
        """The given context unchanged (an empty one when none is given, as W3C's does)."""
        return context if context is not None else Context()

    def inject(
        self,
        carrier: CarrierT,
        context: Context | None = None,
        setter: Setter[CarrierT] = default_setter,
    ) -> None:
        """Nothing to write."""

    @property
    def fields(self) -> set[str]:
        """No header is read or written."""
        return set()


def enabled() -> bool:
    """Whether this process exports telemetry (``setup`` ran with an endpoint)."""
    return _active is not None and _active.pid == os.getpid()


def setup(settings: TelemetrySettings, role: str) -> bool:
    """Install the OTLP providers for a process of ``role`` (api, worker or beat), once.

    Returns whether telemetry is on. Call it before the application is built: the tracing
    middleware binds to the providers installed here.
    """
    global _active
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    with _lock:
        if _active is not None or settings.otlp_endpoint is None:
            return enabled()
        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = SEMCONV_OPT_IN
        resource = _resource(settings.service_name, role)
        logger_provider = _logger_provider(settings, resource)
        _active = _Telemetry(
            meter_provider=_meter_provider(settings, resource),
            tracer_provider=_tracer_provider(settings, resource),
            logger_provider=logger_provider,
            handler=OtlpLogHandler(logger_provider),
            pid=os.getpid(),
        )
        metrics.set_meter_provider(_active.meter_provider)
        trace.set_tracer_provider(_active.tracer_provider)
        # A tenant's ``traceparent`` header must not choose our trace ids or force sampling:
        # every request starts its own trace (its X-Request-Id is the handle clients get).
        propagate.set_global_textmap(IgnoreIncomingContext())
        qc_logging.add_handler(_active.handler)
    atexit.register(shutdown)
    return True


def shutdown() -> None:
    """Flush and stop the exporters (idempotent; a no-op when telemetry is off)."""
    global _active
    with _lock:
        active, _active = _active, None
    if active is None or active.pid != os.getpid():
        return  # off, or inherited through a fork: the parent flushes its own
    qc_logging.remove_handler(active.handler)
    active.tracer_provider.shutdown()
    active.logger_provider.shutdown()
    active.meter_provider.shutdown(timeout_millis=SHUTDOWN_TIMEOUT_MS)


def signal_url(endpoint: str, signal: str) -> str:
    """``<endpoint>/v1/<signal>``: GreptimeDB's base is ``http://host:4000/v1/otlp``."""
    return f"{endpoint.rstrip('/')}/v1/{signal}"


def _resource(service_name: str, role: str) -> Resource:
    """Who is exporting: one ``service.instance.id`` per process, so replicas never collide."""
    try:
        version = metadata.version("queuecore-server")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return Resource.create(
        {
            "service.name": service_name,
            "service.version": version,
            "service.instance.id": str(uuid.uuid4()),
            "queuecore.role": role,
            "host.name": socket.gethostname(),
            "process.pid": os.getpid(),
        }
    )


def _exporter_options(settings: TelemetrySettings, signal: str) -> dict[str, Any]:
    assert settings.otlp_endpoint is not None
    return {
        "endpoint": signal_url(settings.otlp_endpoint, signal),
        "headers": settings.headers_for(signal),
        "timeout": EXPORT_TIMEOUT_S,
        "compression": Compression.NoCompression,
    }


def _meter_provider(settings: TelemetrySettings, resource: Resource) -> MeterProvider:
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(**_exporter_options(settings, "metrics")),
        export_interval_millis=settings.export_interval_ms,
        export_timeout_millis=EXPORT_TIMEOUT_S * 1000,
    )
    return MeterProvider(resource=resource, metric_readers=[reader], shutdown_on_exit=False)


def _tracer_provider(settings: TelemetrySettings, resource: Resource) -> TracerProvider:
    sampler = ParentBased(TraceIdRatioBased(settings.traces_sample_ratio))
    provider = TracerProvider(resource=resource, sampler=sampler, shutdown_on_exit=False)
    provider.add_span_processor(
        BatchSpanProcessor(
            OTLPSpanExporter(**_exporter_options(settings, "traces")),
            schedule_delay_millis=min(settings.export_interval_ms, MAX_BATCH_DELAY_MS),
            export_timeout_millis=EXPORT_TIMEOUT_S * 1000,
        )
    )
    return provider


def _logger_provider(settings: TelemetrySettings, resource: Resource) -> LoggerProvider:
    provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_log_record_processor(
        BatchLogRecordProcessor(
            OTLPLogExporter(**_exporter_options(settings, "logs")),
            schedule_delay_millis=min(settings.export_interval_ms, MAX_BATCH_DELAY_MS),
            export_timeout_millis=EXPORT_TIMEOUT_S * 1000,
        )
    )
    return provider


# --- logs -------------------------------------------------------------------------------------

# The exporters' own loggers: a failed export must not log a record that needs exporting.
_OWN_LOGGERS = ("opentelemetry", "urllib3", "requests")
# Fields that are OTLP log record fields or structlog bookkeeping, not attributes.
_NOT_ATTRIBUTES = frozenset(
    {"event", "timestamp", "level", "logger", "trace_id", "span_id", "exc_info", "stack_info"}
)


def _severity(levelno: int) -> SeverityNumber:
    if levelno >= logging.CRITICAL:
        return SeverityNumber.FATAL
    if levelno >= logging.ERROR:
        return SeverityNumber.ERROR
    if levelno >= logging.WARNING:
        return SeverityNumber.WARN
    if levelno >= logging.INFO:
        return SeverityNumber.INFO
    return SeverityNumber.DEBUG


class OtlpLogHandler(logging.Handler):
    """A stdlib handler turning every log line (structlog's and foreign ones) into an OTLP record.

    The structured fields become attributes: ``request_id``, ``organisation_id``, ``task_id`` and
    the rest. The body is the event name (structlog) or the formatted message (stdlib).
    """

    def __init__(self, provider: LoggerProvider) -> None:
        super().__init__()
        self._provider = provider
        self._loggers: dict[str, Logger] = {}

    def emit(self, record: logging.LogRecord) -> None:
        """Translate and hand to the batch processor (which never blocks on the network)."""
        if record.name.startswith(_OWN_LOGGERS):
            return
        try:
            body, attributes = _fields(record)
            self._logger(record.name).emit(
                timestamp=int(record.created * 1e9),
                observed_timestamp=time.time_ns(),
                context=get_current(),
                severity_number=_severity(record.levelno),
                severity_text=record.levelname,
                body=body,
                attributes=attributes,
            )
        except Exception:
            self.handleError(record)

    def _logger(self, name: str) -> Logger:
        found = self._loggers.get(name)
        if found is None:
            found = self._loggers[name] = self._provider.get_logger(name)
        return found


def _fields(record: logging.LogRecord) -> tuple[str, dict[str, Any]]:
    """The body and attributes of a record."""
    if isinstance(record.msg, dict):  # structlog's: already through the shared processors
        event: Mapping[str, Any] = record.msg
    else:  # a foreign logger's: bound context and masking as the stderr renderer does
        fresh = {"event": record.getMessage(), **structlog.contextvars.get_contextvars()}
        event = qc_logging.redact_secrets(None, "", fresh)
    attributes = {
        key: _value(value)
        for key, value in event.items()
        if key not in _NOT_ATTRIBUTES and not key.startswith("_") and value is not None
    }
    exc_info = event.get("exc_info") or record.exc_info
    if exc_info:
        attributes.update(_exception(exc_info))
    return qc_logging.redact(str(event.get("event", ""))), attributes


def _value(value: Any) -> Any:
    """An OTLP attribute value: scalars as they are, anything else as (masked) text."""
    if isinstance(value, bool | int | float):
        return value
    return qc_logging.redact(value if isinstance(value, str) else str(value))


def _exception(exc_info: Any) -> dict[str, str]:
    """``exception.*`` attributes (semantic conventions) of an ``exc_info`` value."""
    if isinstance(exc_info, BaseException):
        error: BaseException | None = exc_info
    elif isinstance(exc_info, tuple):
        error = exc_info[1]
    else:
        error = sys.exc_info()[1]
    if error is None:
        return {}
    return {
        "exception.type": type(error).__name__,
        "exception.message": qc_logging.redact(str(error)),
        "exception.stacktrace": qc_logging.redact(
            "".join(traceback.format_exception(type(error), error, error.__traceback__))
        ),
    }
