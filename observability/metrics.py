"""The metric catalogue: every QueueCore instrument, created once, at import.

docs/observability.md lists them with their units and attributes. The instruments come from the
global OpenTelemetry meter: until :func:`observability.telemetry.setup` installs a meter
provider they are the API's proxies, whose ``add``/``record`` do nothing, so code records
unconditionally and a process without an OTLP endpoint pays a method call per record.

Rules that keep the cost and the cardinality bounded:

- Record per request, per flush, per pull or ack batch, never per message: a counter gets the
  batch's size as its value.
- Attributes are small closed sets (delivery mode, latency class, statement name, operation,
  task name, outcome, error class). Never a topic, group, tenant or key: a multi-tenant broker
  has unbounded numbers of those, and every attribute combination is a series (in GreptimeDB,
  a tag). Per-tenant numbers are billing's usage metering and the lag analytics.
- Attribute dicts are built once and reused (the SDK hashes them on every record).
- The message counters of the publish and consume paths are :class:`HotCounter`: summed in the
  process and read by the exporter at each collection, since the SDK's ``Counter.add`` costs
  ~12 µs a call (it validates and hashes the attributes every time) against ~0.5 µs here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Final

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Counter, Histogram, Observation

_meter = metrics.get_meter("queuecore")


class HotCounter:
    """A monotonic counter for hot paths: totals kept per attribute set, observed at export.

    Exported as an OTLP cumulative monotonic sum, like a ``Counter``. Costs a lock and a dict
    update per :meth:`add`; with telemetry off the totals are never read (and stay a few ints).
    """

    def __init__(self, name: str, unit: str, description: str) -> None:
        self._totals: dict[frozenset[tuple[str, str]], list[float]] = {}
        self._lock = threading.Lock()
        _meter.create_observable_counter(
            name, callbacks=[self._observe], unit=unit, description=description
        )

    def add(self, amount: float, attributes: Mapping[str, str]) -> None:
        """Add ``amount`` (a batch's size) to the series of ``attributes`` (a closed set)."""
        key = frozenset(attributes.items())
        with self._lock:
            total = self._totals.get(key)
            if total is None:
                self._totals[key] = [amount]
            else:
                total[0] += amount

    def _observe(self, _options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            totals = [(dict(key), total[0]) for key, total in self._totals.items()]
        return [Observation(value, attributes) for attributes, value in totals]


# Bucket bounds: the SDK's defaults suit milliseconds, these instruments record seconds and bytes.
SECONDS_BUCKETS: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
BYTES_BUCKETS: Final = tuple(float(1024 * 4**power) for power in range(10))  # 1 KiB … 256 MiB
COUNT_BUCKETS: Final = (1.0, 2.0, 5.0, 10.0, 50.0, 100.0, 500.0, 1_000.0, 5_000.0, 10_000.0)


def _seconds(name: str, description: str) -> Histogram:
    return _meter.create_histogram(
        name, unit="s", description=description, explicit_bucket_boundaries_advisory=SECONDS_BUCKETS
    )


# --- publishing -------------------------------------------------------------------------------

MESSAGES_PUBLISHED: Final = HotCounter(
    "queuecore.messages.published",
    unit="{message}",
    description="Messages answered 2xx by a publish (idempotent retries included).",
)
PUBLISHED_BYTES: Final = HotCounter(
    "queuecore.messages.published.size",
    unit="By",
    description="Encoded size of the messages of successful publishes.",
)
FLUSH_DURATION: Final = _seconds(
    "queuecore.writer.flush.duration",
    "One segment-writer flush attempt: encode, PUT to S3, commit in PostgreSQL.",
)
FLUSH_SIZE: Final = _meter.create_histogram(
    "queuecore.writer.flush.size",
    unit="By",
    description="Bytes of the segment object of one flush attempt.",
    explicit_bucket_boundaries_advisory=BYTES_BUCKETS,
)
FLUSH_MESSAGES: Final = _meter.create_histogram(
    "queuecore.writer.flush.messages",
    unit="{message}",
    description="Messages in the segment object of one flush attempt.",
    explicit_bucket_boundaries_advisory=COUNT_BUCKETS,
)

# --- consuming --------------------------------------------------------------------------------

MESSAGES_DELIVERED: Final = HotCounter(
    "queuecore.messages.delivered",
    unit="{message}",
    description="Messages leased to group members by pulls and streams (redeliveries included).",
)
MESSAGES_ACKED: Final = HotCounter(
    "queuecore.messages.acked", unit="{message}", description="Ack ids answered as acked."
)
MESSAGES_NACKED: Final = HotCounter(
    "queuecore.messages.nacked",
    unit="{message}",
    description="Nacks accepted (scheduled for retry or dead-lettered).",
)
MESSAGES_DEAD_LETTERED: Final = HotCounter(
    "queuecore.messages.dead_lettered",
    unit="{message}",
    description="Messages moved to a group's dead-letter queue.",
)

# --- storage ----------------------------------------------------------------------------------

DB_STATEMENT_DURATION: Final = _seconds(
    "queuecore.db.statement.duration", "One named PostgreSQL statement (or pipeline), round trip."
)
DB_STATEMENT_ERRORS: Final = _meter.create_counter(
    "queuecore.db.statement.errors",
    unit="{error}",
    description="Named PostgreSQL statements that raised.",
)
OBJECT_STORE_DURATION: Final = _seconds(
    "queuecore.object_store.duration", "One object-store call (S3 request or paginated listing)."
)
OBJECT_STORE_ERRORS: Final = _meter.create_counter(
    "queuecore.object_store.errors", unit="{error}", description="Object-store calls that raised."
)

# --- Celery -----------------------------------------------------------------------------------

TASK_DURATION: Final = _seconds("queuecore.task.duration", "One Celery task run, in the worker.")
TASK_FAILURES: Final = _meter.create_counter(
    "queuecore.task.failures", unit="{task}", description="Celery task runs that raised."
)


# --- attribute sets, built once ---------------------------------------------------------------

DELIVERY = "queuecore.delivery"
LATENCY_CLASS = "queuecore.latency_class"
ERROR_TYPE = "error.type"

_DELIVERY = {True: "exactly_once", False: "at_least_once"}
_PUBLISH_ATTRIBUTES: dict[tuple[bool, str], dict[str, str]] = {}
_DELIVERY_ATTRIBUTES = {once: {DELIVERY: mode} for once, mode in _DELIVERY.items()}
_DEAD_LETTER_ATTRIBUTES = {
    (once, reason): {DELIVERY: mode, "reason": reason}
    for once, mode in _DELIVERY.items()
    for reason in ("nack", "redelivery")
}
_OUTCOMES = {
    outcome: {"outcome": outcome}
    for outcome in ("committed", "conflict", "put_failed", "commit_failed", "outcome_unknown")
}


def publish_attributes(exactly_once: bool, latency_class: str) -> dict[str, str]:
    """Attributes of the publish counters: the topic's delivery mode and latency class."""
    key = (exactly_once, latency_class)
    found = _PUBLISH_ATTRIBUTES.get(key)
    if found is None:  # the latency classes are a closed set, so this dict stays tiny
        found = _PUBLISH_ATTRIBUTES[key] = {
            DELIVERY: _DELIVERY[exactly_once],
            LATENCY_CLASS: latency_class,
        }
    return found


def delivery_attributes(exactly_once: bool) -> dict[str, str]:
    """Attributes of the consume counters: the topic's delivery mode."""
    return _DELIVERY_ATTRIBUTES[exactly_once]


def dead_letter_attributes(exactly_once: bool, reason: str) -> dict[str, str]:
    """Attributes of the dead-letter counter: delivery mode and ``nack`` or ``redelivery``."""
    return _DEAD_LETTER_ATTRIBUTES[(exactly_once, reason)]


def flush_attributes(outcome: str) -> dict[str, str]:
    """Attributes of the flush histograms: committed, conflict, put_failed, commit_failed or
    outcome_unknown."""
    return _OUTCOMES[outcome]


# --- timing helpers ---------------------------------------------------------------------------


class Timed:
    """``with`` block recording its duration, and its error class when it raises.

    A fresh (small) object per block: concurrent coroutines each time their own. Cancellation
    (``BaseException``) is timed but not counted as an error.
    """

    __slots__ = ("_attributes", "_duration", "_errors", "_key", "_label", "_started")

    def __init__(
        self,
        duration: Histogram,
        errors: Counter,
        key: str,
        label: str,
        attributes: dict[str, str],
    ) -> None:
        self._duration, self._errors = duration, errors
        self._key, self._label, self._attributes = key, label, attributes
        self._started = 0.0

    def __enter__(self) -> Timed:
        self._started = time.perf_counter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._duration.record(time.perf_counter() - self._started, self._attributes)
        if exc_type is not None and issubclass(exc_type, Exception):
            self._errors.add(1, {self._key: self._label, ERROR_TYPE: exc_type.__name__})


_STATEMENTS: dict[str, dict[str, str]] = {}
_OPERATIONS: dict[str, dict[str, str]] = {}


def db_statement(name: str) -> Timed:
    """Time a named statement: ``with db_statement("pull"): await conn.execute(q.PULL, …)``.

    ``name`` is a constant of the call site (never SQL text, never built from data).
    """
    attributes = _STATEMENTS.get(name)
    if attributes is None:
        attributes = _STATEMENTS[name] = {"statement": name}
    return Timed(DB_STATEMENT_DURATION, DB_STATEMENT_ERRORS, "statement", name, attributes)


def object_store_call(operation: str) -> Timed:
    """Time one object-store operation (``put``, ``get``, ``delete``, ``list``, ``ping``)."""
    attributes = _OPERATIONS.get(operation)
    if attributes is None:
        attributes = _OPERATIONS[operation] = {"operation": operation}
    return Timed(OBJECT_STORE_DURATION, OBJECT_STORE_ERRORS, "operation", operation, attributes)
