"""Structured logging: JSON lines when not on a TTY, with context bound per request and per task.

The standard library's loggers (uvicorn, celery, psycopg) go through the same renderer, so every
line of a process has one shape and carries the bound ``request_id``.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

from infra.settings import LogSettings

_SHARED: list[Any] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


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
    root.handlers[:] = [handler]
    root.setLevel(settings.level)
    # httpx logs every request's URL at INFO; a webhook URL may carry a token.
    for noisy in ("botocore", "boto3", "urllib3", "s3transfer", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    """A structured logger."""
    return structlog.stdlib.get_logger(name)


def bind(**values: Any) -> None:
    """Bind values into every log line of the current request or task."""
    structlog.contextvars.bind_contextvars(**values)


def clear() -> None:
    """Forget the bound context."""
    structlog.contextvars.clear_contextvars()
