"""In-process pieces: masking, the OTLP log handler, timing helpers, route templates, settings."""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Iterator

import pytest
from litestar.plugins.opentelemetry import OpenTelemetryPlugin
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from core import settings
from core.settings import LogSettings, TelemetrySettings
from observability import logging as qc_logging
from observability import telemetry
from observability.metrics import Timed
from observability.telemetry import OtlpLogHandler

KEY = "pq_live_sk_" + "A1b2C3d4" * 4


def test_redact_masks_api_keys_and_url_passwords() -> None:
    text = f"key {KEY} and postgresql://queuecore:hunter2@db:5432/qc"
    masked = qc_logging.redact(text)
    assert KEY not in masked and "hunter2" not in masked
    assert "pq_live_sk_[REDACTED]" in masked
    assert "postgresql://queuecore:[REDACTED]@db:5432/qc" in masked


def test_secret_named_fields_are_masked_but_key_ids_are_kept() -> None:
    event = {
        "event": "x",
        "api_key": "anything",
        "webhook_secret": "whsec",
        "authorization": "Basic abc",
        "api_key_id": "key_123",
        "detail": f"bad {KEY}",
    }
    masked = qc_logging.redact_secrets(None, "info", dict(event))
    assert masked["api_key"] == masked["webhook_secret"] == masked["authorization"] == "[REDACTED]"
    assert masked["api_key_id"] == "key_123"
    assert KEY not in masked["detail"]


@pytest.fixture
def exported() -> Iterator[tuple[InMemoryLogRecordExporter, logging.Logger]]:
    """Structured logging into an in-memory OTLP log exporter, through :class:`OtlpLogHandler`."""
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    handler = OtlpLogHandler(provider)
    qc_logging.configure(LogSettings(level="INFO", format="json"), stream=io.StringIO())
    qc_logging.add_handler(handler)
    qc_logging.clear()
    try:
        yield exporter, logging.getLogger("queuecore.otlp_test")
    finally:
        qc_logging.remove_handler(handler)
        qc_logging.clear()
        qc_logging.configure(settings.logs())


def test_structlog_lines_become_records_with_bound_fields_and_trace_ids(
    exported: tuple[InMemoryLogRecordExporter, logging.Logger],
) -> None:
    exporter, _ = exported
    tracer = TracerProvider().get_tracer("test")
    qc_logging.bind(request_id="req_abcdefgh12345678", organisation_id="org_1")
    with tracer.start_as_current_span("request") as span:
        qc_logging.get_logger("queuecore.otlp_test").warning(
            "flush_failed", attempts=3, api_key=KEY, detail=f"postgresql://u:pw@h/db {KEY}"
        )
    [record] = [r.log_record for r in exporter.get_finished_logs()]
    assert record.body == "flush_failed"
    assert record.severity_text == "WARNING"
    assert record.attributes is not None
    attributes = dict(record.attributes)
    assert attributes["request_id"] == "req_abcdefgh12345678"
    assert attributes["organisation_id"] == "org_1"
    assert attributes["attempts"] == 3
    assert attributes["api_key"] == "[REDACTED]"
    assert KEY not in str(attributes) and "pw@" not in str(attributes)
    assert record.trace_id == span.get_span_context().trace_id
    assert record.span_id == span.get_span_context().span_id
    assert "trace_id" not in attributes  # a field of the record, not an attribute


def test_foreign_stdlib_lines_get_the_bound_context_and_masking(
    exported: tuple[InMemoryLogRecordExporter, logging.Logger],
) -> None:
    exporter, stdlib_logger = exported
    qc_logging.bind(task_id="task-1")
    try:
        raise RuntimeError(f"connect postgresql://u:secretpw@h/db with {KEY}")
    except RuntimeError:
        stdlib_logger.exception("worker saw %s", KEY)
    [record] = [r.log_record for r in exporter.get_finished_logs()]
    assert record.body == "worker saw pq_live_sk_[REDACTED]"
    assert record.attributes is not None
    attributes = dict(record.attributes)
    assert attributes["task_id"] == "task-1"
    assert attributes["exception.type"] == "RuntimeError"
    assert "secretpw" not in str(attributes) and KEY not in str(attributes)


def test_the_exporters_own_loggers_are_not_exported(
    exported: tuple[InMemoryLogRecordExporter, logging.Logger],
) -> None:
    exporter, _ = exported
    logging.getLogger("opentelemetry.exporter.otlp").warning("Failed to export batch")
    logging.getLogger("queuecore.otlp_test").warning("kept")
    assert [r.log_record.body for r in exporter.get_finished_logs()] == ["kept"]


def _points(reader: InMemoryMetricReader, name: str) -> list[tuple[dict[str, object], object]]:
    data = reader.get_metrics_data()
    assert data is not None
    return [
        (dict(point.attributes or {}), point)
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]


def test_timed_records_duration_and_counts_errors_but_not_cancellation() -> None:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    duration, errors = meter.create_histogram("d", unit="s"), meter.create_counter("e")

    def timed() -> Timed:
        return Timed(duration, errors, "statement", "pull", {"statement": "pull"})

    with timed():
        pass
    with pytest.raises(ValueError), timed():
        raise ValueError("boom")
    with pytest.raises(asyncio.CancelledError), timed():
        raise asyncio.CancelledError

    [(attributes, histogram)] = _points(reader, "d")
    assert attributes == {"statement": "pull"}
    assert histogram.count == 3  # type: ignore[attr-defined]
    [(error_attributes, counter)] = _points(reader, "e")
    assert error_attributes == {"statement": "pull", "error.type": "ValueError"}
    assert counter.value == 1  # type: ignore[attr-defined]


def test_route_details_name_spans_by_template_and_leave_unrouted_paths_unnamed() -> None:
    from control_plane.app import create_app
    from control_plane.edge.tracing import route_details

    app = create_app()
    name, attributes = route_details(
        {"app": app, "type": "http", "method": "POST", "path": "/v1/topics/orders-17/messages"}
    )
    assert name == "POST /v1/topics/{topic}/messages"
    assert attributes == {"http.route": "/v1/topics/{topic}/messages"}
    assert route_details({"app": app, "type": "http", "method": "GET", "path": "/nope/x"}) == (
        "GET",
        {},
    )


def test_without_an_endpoint_setup_installs_nothing_and_the_app_has_no_tracing() -> None:
    from control_plane.app import create_app

    assert telemetry.setup(TelemetrySettings.from_env({}), role="api") is False
    assert not telemetry.enabled()
    assert not any(isinstance(p, OpenTelemetryPlugin) for p in create_app().plugins)
    with pytest.raises(ValueError, match="role"):
        telemetry.setup(TelemetrySettings.from_env({}), role="cron")


def test_signal_headers_put_greptime_pipelines_on_their_signal_only() -> None:
    configured = TelemetrySettings.from_env(
        {
            "QUEUECORE_OTLP_ENDPOINT": "http://greptime:4000/v1/otlp",
            "QUEUECORE_OTLP_HEADERS": "X-Greptime-DB-Name=public,Authorization=Basic%20dTpw",
            "QUEUECORE_OTLP_LOGS_HEADERS": "X-Greptime-Log-Table-Name=qc_logs",
        }
    )
    common = {"X-Greptime-DB-Name": "public", "Authorization": "Basic dTpw"}
    assert configured.headers_for("metrics") == common
    assert configured.headers_for("logs") == {**common, "X-Greptime-Log-Table-Name": "qc_logs"}
    assert configured.headers_for("traces") == {
        **common,
        "x-greptime-pipeline-name": "greptime_trace_v1",
    }
    assert telemetry.signal_url("http://greptime:4000/v1/otlp/", "logs") == (
        "http://greptime:4000/v1/otlp/v1/logs"
    )
