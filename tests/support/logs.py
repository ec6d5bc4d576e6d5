"""Reading what a QueueCore logger logged (structlog goes through the stdlib logger of its name)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


class LogRecords(logging.Handler):
    """The messages (event names and fields) a logger emitted while attached."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(str(record.msg))


@contextmanager
def captured(logger_name: str) -> Iterator[LogRecords]:
    """What ``logger_name`` logs inside the block."""
    handler, logger = LogRecords(), logging.getLogger(logger_name)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
