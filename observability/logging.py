"""Structured logging: JSON lines when not on a TTY, with context bound per request and per task.

The standard library's loggers (uvicorn, celery, psycopg) go through the same renderer, so every
line of a process has one shape and carries the bound ``request_id``, and the ``trace_id`` and
``span_id`` of the current span when tracing is on. Secrets are masked before any handler sees
a line (:func:`redact_secrets`). :mod:`observability.telemetry` adds its OTLP handler with
:func:`add_handler`, which survives a later :func:`configure`.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog
from opentelemetry import trace

from core.settings import LogSettings

REDACTED = "[REDACTED]"
# Fields whose value is a credential whatever it looks like (``api_key_id`` is not one).
_SECRET_FIELD = re.compile(
    r"(?i)(^|_)(authorization|api_?key|secret|password|passwd|token|cookie|credentials?)$"
)
# An API key anywhere in a value (DESIGN §3: prefix + 32 base62 characters).
_API_KEY = re.compile(r"pq_(live|test)_sk_[0-9A-Za-z]{32}")
# The password of a URL (a database or Redis URL in an error message).
_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@\s]+@")
# An invitation or password-reset link's token (tenants.team.tokens), in a path or a message.
_LINK_TOKEN = re.compile(r"qc_(inv|rst)_[A-Za-z0-9_-]+")


def redact(text: str) -> str:
    """``text`` with API keys, link tokens and URL passwords masked."""
    if "_sk_" in text:
        text = _API_KEY.sub(lambda m: f"pq_{m.group(1)}_sk_{REDACTED}", text)
    if "qc_" in text:
        text = _LINK_TOKEN.sub(lambda m: f"qc_{m.group(1)}_{REDACTED}", text)
    if "@" in text and "://" in text:
        text = _URL_PASSWORD.sub(rf"\1{REDACTED}@", text)
    return text


def redact_secrets(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Processor: secret-named fields masked, API keys and URL passwords masked in strings."""
    for key, value in event_dict.items():
        if key.startswith("_"):
            continue  # structlog's own bookkeeping (the stdlib record)
        if _SECRET_FIELD.search(key) and value is not None:
            event_dict[key] = REDACTED
        elif isinstance(value, str):
            event_dict[key] = redact(value)
    return event_dict


def add_trace_context(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Processor: ``trace_id`` and ``span_id`` of the current span, when there is one."""
    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        event_dict["trace_id"] = format(context.trace_id, "032x")
        event_dict["span_id"] = format(context.span_id, "016x")
    return event_dict


_SHARED: list[Any] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    add_trace_context,
    redact_secrets,
]
_EXTRA_HANDLERS: list[logging.Handler] = []


def configure(settings: LogSettings, *, stream: Any = None) -> None:
    """Route structlog and stdlib logging to one handler on ``stream`` (stderr by default)."""
    stream = stream or sys.stderr
    as_json = settings.format == "json" or (settings.format == "auto" and not stream.isatty())
    renderer: Any = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
            *_SHARED,
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_SHARED,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler, *_EXTRA_HANDLERS]
    root.setLevel(settings.level)
    # httpx logs every request's URL at INFO; a webhook URL may carry a token.
    for noisy in ("botocore", "boto3", "urllib3", "s3transfer", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def add_handler(handler: logging.Handler) -> None:
    """Send every log line to ``handler`` too, now and after any later :func:`configure`."""
    _EXTRA_HANDLERS.append(handler)
    logging.getLogger().addHandler(handler)


def remove_handler(handler: logging.Handler) -> None:
    """Undo :func:`add_handler`."""
    if handler in _EXTRA_HANDLERS:
        _EXTRA_HANDLERS.remove(handler)
    logging.getLogger().removeHandler(handler)


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    """A structured logger."""
    return structlog.stdlib.get_logger(name)


def bind(**values: Any) -> None:
    """Bind values into every log line of the current request or task."""
    structlog.contextvars.bind_contextvars(**values)


def clear() -> None:
    """Forget the bound context."""
    structlog.contextvars.clear_contextvars()
