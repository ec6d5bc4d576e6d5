"""Settings, one object per concern, read from ``QUEUECORE_*`` environment variables.

Each loader validates what it reads and raises :class:`SettingsError` naming the variable, so a
process with a bad setting stops with one clear line (see ``infra.cli``).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import unquote, urlsplit

PREFIX = "QUEUECORE_"


MiB = 1024 * 1024


class SettingsError(Exception):
    """A setting is missing or malformed; the message names the variable."""

    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(f"{variable}: {problem}")
        self.variable = variable


def _env(name: str, default: str | None = None, env: Mapping[str, str] | None = None) -> str | None:
    value = (env if env is not None else os.environ).get(PREFIX + name)
    return default if value is None or value == "" else value


def _required(name: str, env: Mapping[str, str] | None = None) -> str:
    value = _env(name, env=env)
    if value is None:
        raise SettingsError(PREFIX + name, "is required but not set")
    return value


def _int(name: str, default: int, low: int, high: int, env: Mapping[str, str] | None = None) -> int:
    raw = _env(name, str(default), env)
    assert raw is not None
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(PREFIX + name, f"must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise SettingsError(PREFIX + name, f"must be between {low} and {high}, got {value}")
    return value


_BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _ratio(name: str, default: float, env: Mapping[str, str] | None = None) -> float:
    raw = _env(name, str(default), env)
    assert raw is not None
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(PREFIX + name, f"must be a number, got {raw!r}") from None
    if not 0.0 <= value <= 1.0:
        raise SettingsError(PREFIX + name, f"must be between 0 and 1, got {value}")
    return value


def _bool(name: str, default: bool, env: Mapping[str, str] | None = None) -> bool:
    raw = (_env(name, env=env) or str(default)).lower()
    if raw not in _BOOLEANS:
        raise SettingsError(PREFIX + name, f"must be true or false, got {raw!r}")
    return _BOOLEANS[raw]


def _port(name: str, default: int, env: Mapping[str, str] | None = None) -> int:
    return _int(name, default, 1, 65535, env)


def _choice(
    name: str, default: str, choices: tuple[str, ...], env: Mapping[str, str] | None = None
) -> str:
    value = _env(name, default, env)
    assert value is not None
    if value not in choices:
        raise SettingsError(PREFIX + name, f"must be one of {', '.join(choices)}, got {value!r}")
    return value


def _url(name: str, value: str, schemes: tuple[str, ...]) -> str:
    parts = urlsplit(value)
    if parts.scheme not in schemes or not (parts.netloc or parts.path):
        raise SettingsError(PREFIX + name, f"must be a {'/'.join(schemes)} URL, got {value!r}")
    return value


Loader = TypeVar("Loader", bound=Callable[[], Any])
_LOADERS: list[Any] = []


def _cached(loader: Loader) -> Loader:
    """A settings group of the process: read from the environment once, then kept (a new
    loader needs nothing else: :func:`clear_caches` finds it here)."""
    cached = functools.cache(loader)
    _LOADERS.append(cached)
    return cast(Loader, cached)


def clear_caches() -> None:
    """Forget every cached settings group (tests change the environment)."""
    for loader in _LOADERS:
        loader.cache_clear()


@dataclass(frozen=True, slots=True)
class DatabaseSettings:
    """PostgreSQL connection (``QUEUECORE_DATABASE_URL``) and pool sizing."""

    url: str
    pool_min: int
    pool_max: int
    statement_timeout_ms: int = 5_000  # the API's statements; 0: none (docs/faults.md)
    request_timeout_ms: int = 7_000  # all of one API request's waits on PostgreSQL; 0: none

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DatabaseSettings:
        """Read and validate."""
        url = _url("DATABASE_URL", _required("DATABASE_URL", env), ("postgresql", "postgres"))
        return cls(
            url=url,
            pool_min=_int("DATABASE_POOL_MIN", 1, 0, 100, env),
            pool_max=_int("DATABASE_POOL_MAX", 10, 1, 500, env),
            statement_timeout_ms=_int("DATABASE_STATEMENT_TIMEOUT_MS", 5_000, 0, 3_600_000, env),
            request_timeout_ms=_int("DATABASE_REQUEST_TIMEOUT_MS", 7_000, 0, 3_600_000, env),
        )


@dataclass(frozen=True, slots=True)
class ObjectStoreSettings:
    """S3-compatible object store: ``s3://bucket/prefix`` plus endpoint and credentials."""

    url: str
    bucket: str
    prefix: str
    endpoint_url: str | None
    access_key_id: str | None
    secret_access_key: str | None
    region: str
    connect_timeout_ms: int = 2_000
    request_timeout_ms: int = 5_000  # per attempt; a stalled S3 fails fast (docs/faults.md)
    put_threads: int = 0  # small segment PUTs from threads instead of the event loop

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ObjectStoreSettings:
        """Read and validate."""
        url = _url("OBJECT_STORE_URL", _required("OBJECT_STORE_URL", env), ("s3",))
        parts = urlsplit(url)
        if len(parts.netloc) < 3:
            raise SettingsError(
                PREFIX + "OBJECT_STORE_URL", "bucket name needs at least 3 characters"
            )
        endpoint = _env("S3_ENDPOINT_URL", env=env)
        if endpoint is not None:
            _url("S3_ENDPOINT_URL", endpoint, ("http", "https"))
        return cls(
            url=url,
            bucket=parts.netloc,
            prefix=parts.path.strip("/"),
            endpoint_url=endpoint,
            access_key_id=_env("S3_ACCESS_KEY_ID", env=env),
            secret_access_key=_env("S3_SECRET_ACCESS_KEY", env=env),
            region=_env("S3_REGION", "us-east-1", env) or "us-east-1",
            connect_timeout_ms=_int("S3_CONNECT_TIMEOUT_MS", 2_000, 50, 60_000, env),
            request_timeout_ms=_int("S3_REQUEST_TIMEOUT_MS", 5_000, 100, 600_000, env),
            put_threads=_int("S3_PUT_THREADS", 0, 0, 64, env),
        )


@dataclass(frozen=True, slots=True)
class RedisSettings:
    """Redis for the Celery broker, rate limits and caches."""

    url: str

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RedisSettings:
        """Read and validate."""
        return cls(url=_url("REDIS_URL", _required("REDIS_URL", env), ("redis", "rediss", "unix")))


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """Where the API listens and how many server workers ``queuecore serve`` runs."""

    host: str
    port: int
    workers: int
    public_url: str
    max_connections: int = 4096  # per server process (control_plane.http_limits)
    max_connections_per_address: int = 256  # per client address that is not a trusted proxy
    body_timeout_s: int = 30  # from the end of a request's head to the end of its body

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> HttpSettings:
        """Read and validate."""
        host = _env("HTTP_HOST", "127.0.0.1", env) or "127.0.0.1"
        port = _port("HTTP_PORT", 8080, env)
        default_public = f"http://{host}:{port}"
        return cls(
            host=host,
            port=port,
            workers=_int("HTTP_WORKERS", 2, 1, 64, env),
            public_url=_env("PUBLIC_URL", default_public, env) or default_public,
            max_connections=_int("HTTP_MAX_CONNECTIONS", 4096, 1, 1_000_000, env),
            max_connections_per_address=_int(
                "HTTP_MAX_CONNECTIONS_PER_ADDRESS", 256, 1, 1_000_000, env
            ),
            body_timeout_s=_int("HTTP_BODY_TIMEOUT_S", 30, 1, 3600, env),
        )


@dataclass(frozen=True, slots=True)
class KafkaSettings:
    """The Kafka protocol listener of ``queuecore serve`` (docs/kafka.md); port 0 is off."""

    host: str
    port: int
    advertised_host: str
    advertised_port: int
    tls_port: int
    tls_cert: str | None
    tls_key: str | None
    max_request_bytes: int

    @property
    def enabled(self) -> bool:
        """Whether any Kafka listener runs."""
        return self.port > 0 or self.tls_enabled

    @property
    def tls_enabled(self) -> bool:
        """Whether the SASL_SSL listener runs (a certificate is configured)."""
        return self.tls_cert is not None and self.tls_port > 0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> KafkaSettings:
        """Read and validate."""
        host = _env("KAFKA_HOST", None, env) or _env("HTTP_HOST", "127.0.0.1", env) or "127.0.0.1"
        port = _int("KAFKA_PORT", 0, 0, 65535, env)
        cert, key = _env("KAFKA_TLS_CERT", None, env), _env("KAFKA_TLS_KEY", None, env)
        for name, path in (("KAFKA_TLS_CERT", cert), ("KAFKA_TLS_KEY", key)):
            if path is not None and not Path(path).is_file():
                raise SettingsError(PREFIX + name, f"no such file: {path}")
        if (cert is None) != (key is None):
            raise SettingsError(
                PREFIX + "KAFKA_TLS_KEY", "set both KAFKA_TLS_CERT and KAFKA_TLS_KEY"
            )
        default_advertised = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        return cls(
            host=host,
            port=port,
            advertised_host=_env("KAFKA_ADVERTISED_HOST", default_advertised, env)
            or default_advertised,
            advertised_port=_int("KAFKA_ADVERTISED_PORT", port, 0, 65535, env),
            tls_port=_int("KAFKA_TLS_PORT", 9093 if cert else 0, 0, 65535, env),
            tls_cert=cert,
            tls_key=key,
            max_request_bytes=_int("KAFKA_MAX_REQUEST_BYTES", 100 * MiB, 1 * MiB, 1024 * MiB, env),
        )


@dataclass(frozen=True, slots=True)
class ShutdownSettings:
    """How a ``queuecore serve`` replica stops on SIGTERM (docs/shutdown.md)."""

    drain_s: int
    timeout_s: int

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ShutdownSettings:
        """Read and validate."""
        return cls(
            drain_s=_int("SHUTDOWN_DRAIN_S", 5, 0, 300, env),
            timeout_s=_int("SHUTDOWN_TIMEOUT_S", 10, 1, 600, env),
        )


@dataclass(frozen=True, slots=True)
class LogSettings:
    """Log level and format (``json``, ``console``, or ``auto``: JSON when not a TTY)."""

    level: str
    format: str

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LogSettings:
        """Read and validate."""
        return cls(
            level=_choice("LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR"), env),
            format=_choice("LOG_FORMAT", "auto", ("auto", "json", "console"), env),
        )


# GreptimeDB stores OTLP traces only through its trace pipeline; a header on the traces signal
# alone, since the same header on logs would run the log lines through the trace pipeline.
DEFAULT_TRACES_HEADERS = "x-greptime-pipeline-name=greptime_trace_v1"


@dataclass(frozen=True, slots=True)
class TelemetrySettings:
    """OTLP/HTTP export (GreptimeDB's ``/v1/otlp``); off when no endpoint is set.

    ``otlp_headers`` go with every signal; ``logs_headers`` and ``traces_headers`` are added to
    (and override) them for that signal only.
    """

    otlp_endpoint: str | None
    otlp_headers: dict[str, str]
    service_name: str
    export_interval_ms: int = 10_000
    logs_headers: dict[str, str] = field(default_factory=dict)
    traces_headers: dict[str, str] = field(default_factory=dict)
    traces_sample_ratio: float = 1.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TelemetrySettings:
        """Read and validate."""
        endpoint = _env("OTLP_ENDPOINT", env=env)
        if endpoint is not None:
            _url("OTLP_ENDPOINT", endpoint, ("http", "https"))
        return cls(
            otlp_endpoint=endpoint,
            otlp_headers=_headers("OTLP_HEADERS", _env("OTLP_HEADERS", "", env) or ""),
            service_name=_env("SERVICE_NAME", "queuecore", env) or "queuecore",
            export_interval_ms=_int("OTLP_EXPORT_INTERVAL_MS", 10_000, 100, 600_000, env),
            logs_headers=_headers("OTLP_LOGS_HEADERS", _env("OTLP_LOGS_HEADERS", "", env) or ""),
            traces_headers=_headers(
                "OTLP_TRACES_HEADERS",
                _env("OTLP_TRACES_HEADERS", DEFAULT_TRACES_HEADERS, env) or "",
            ),
            traces_sample_ratio=_ratio("OTLP_TRACES_SAMPLE_RATIO", 1.0, env),
        )

    def headers_for(self, signal: str) -> dict[str, str]:
        """The headers of one signal's export requests (``metrics``, ``logs`` or ``traces``)."""
        extra = {"logs": self.logs_headers, "traces": self.traces_headers}.get(signal, {})
        merged = {name.lower(): (name, value) for name, value in self.otlp_headers.items()}
        merged.update((name.lower(), (name, value)) for name, value in extra.items())
        return dict(merged.values())


_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def _headers(variable: str, raw: str) -> dict[str, str]:
    """``name=value,name2=value2``; values may be percent-encoded, as in OTEL_EXPORTER_OTLP_HEADERS."""
    headers: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        name, sep, value = item.partition("=")
        name, value = name.strip(), unquote(value.strip())
        if not sep or not _HEADER_NAME.match(name) or any(c in value for c in "\r\n\0"):
            raise SettingsError(PREFIX + variable, "must look like 'name=value,name2=value2'")
        headers[name] = value
    return headers


@dataclass(frozen=True, slots=True)
class DevStackSettings:
    """Data directory and ports of the embedded services that ``queuecore dev`` starts."""

    data_dir: Path
    postgres_port: int
    redis_port: int
    s3_port: int
    smtp_port: int = 8025  # the local mail sink that shows invitations and resets

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DevStackSettings:
        """Read and validate. SeaweedFS also uses the seven ports after the S3 port."""
        data_dir = Path(_env("DATA_DIR", ".queuecore", env) or ".queuecore").expanduser().resolve()
        return cls(
            data_dir=data_dir,
            postgres_port=_port("DEV_POSTGRES_PORT", 5433, env),
            redis_port=_port("DEV_REDIS_PORT", 6380, env),
            s3_port=_int("DEV_S3_PORT", 8333, 1, 65535 - 7, env),
            smtp_port=_port("DEV_SMTP_PORT", 8025, env),
        )


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    """Outgoing webhooks: whether private addresses may be called, timeout, retries."""

    allow_private: bool = False
    timeout_ms: int = 5_000
    max_attempts: int = 8
    retry_base_ms: int = 5_000

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WebhookSettings:
        """Read and validate. Private addresses are for development stacks and tests only."""
        return cls(
            allow_private=_bool("WEBHOOKS_ALLOW_PRIVATE", False, env),
            timeout_ms=_int("WEBHOOK_TIMEOUT_MS", 5_000, 100, 60_000, env),
            max_attempts=_int("WEBHOOK_MAX_ATTEMPTS", 8, 1, 50, env),
            retry_base_ms=_int("WEBHOOK_RETRY_BASE_MS", 5_000, 0, 3_600_000, env),
        )


@dataclass(frozen=True, slots=True)
class PushSettings:
    """Push delivery: the key that seals signing secrets at rest, and how pushers run."""

    secrets_key: str | None = None  # None: push secrets are stored unsealed (docs/push.md)
    refresh_ms: int = 2_000
    session_timeout_ms: int = 15_000
    max_connections: int = 1_000

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> PushSettings:
        """Read and validate: a secrets key of at least 32 characters when one is given."""
        key = _env("SECRETS_KEY", env=env)
        if key is not None and len(key) < 32:
            raise SettingsError(
                PREFIX + "SECRETS_KEY", "must be at least 32 characters (openssl rand -base64 32)"
            )
        return cls(
            secrets_key=key,
            refresh_ms=_int("PUSHER_REFRESH_MS", 2_000, 100, 60_000, env),
            session_timeout_ms=_int("PUSHER_SESSION_TIMEOUT_MS", 15_000, 3_000, 600_000, env),
            max_connections=_int("PUSHER_MAX_CONNECTIONS", 1_000, 1, 100_000, env),
        )


@_cached
def database() -> DatabaseSettings:
    """The process's database settings."""
    return DatabaseSettings.from_env()


@_cached
def object_store() -> ObjectStoreSettings:
    """The process's object store settings."""
    return ObjectStoreSettings.from_env()


@_cached
def redis() -> RedisSettings:
    """The process's Redis settings."""
    return RedisSettings.from_env()


@_cached
def http() -> HttpSettings:
    """The process's HTTP settings."""
    return HttpSettings.from_env()


@_cached
def kafka() -> KafkaSettings:
    """The process's Kafka listener settings."""
    return KafkaSettings.from_env()


@_cached
def logs() -> LogSettings:
    """The process's log settings."""
    return LogSettings.from_env()


@_cached
def telemetry() -> TelemetrySettings:
    """The process's telemetry settings."""
    return TelemetrySettings.from_env()


@_cached
def webhooks() -> WebhookSettings:
    """The process's outgoing-webhook settings."""
    return WebhookSettings.from_env()


@_cached
def push() -> PushSettings:
    """The process's push-delivery settings."""
    return PushSettings.from_env()


@dataclass(frozen=True, slots=True)
class WriterSettings:
    """Linger per latency class and the flush size cap (``QUEUECORE_WRITER_*``)."""

    linger_ms: int
    standard_linger_ms: int
    max_segment_bytes: int
    resolve_ms: int = 3_000
    # One organisation's publishes in flushes in flight, at most (data_plane.write.fair).
    org_inflight_bytes: int = 4 * 1024 * 1024

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WriterSettings:
        """Read and validate."""
        linger = _int("WRITER_LINGER_MS", 0, 0, 1_000, env)
        standard = _int("WRITER_STANDARD_LINGER_MS", 150, 0, 10_000, env)
        if standard < linger:
            raise SettingsError(
                PREFIX + "WRITER_STANDARD_LINGER_MS",
                f"must be at least QUEUECORE_WRITER_LINGER_MS ({linger}), got {standard}",
            )
        return cls(
            linger_ms=linger,
            standard_linger_ms=standard,
            max_segment_bytes=_int(
                "WRITER_MAX_SEGMENT_BYTES", 8 * 1024 * 1024, 64 * 1024, 1024 * 1024 * 1024, env
            ),
            resolve_ms=_int("WRITER_RESOLVE_MS", 3_000, 0, 60_000, env),
            org_inflight_bytes=_int(
                "WRITER_ORG_INFLIGHT_BYTES", 4 * 1024 * 1024, 64 * 1024, 1024 * 1024 * 1024, env
            ),
        )

    def linger_s(self, latency_class: str) -> float:
        """How long a publish of ``latency_class`` may wait for company (see ``_due_at``)."""
        ms = self.standard_linger_ms if latency_class == "standard" else self.linger_ms
        return ms / 1000


@_cached
def shutdown() -> ShutdownSettings:
    """The process's shutdown settings."""
    return ShutdownSettings.from_env()


@_cached
def writer() -> WriterSettings:
    """The process's writer settings."""
    return WriterSettings.from_env()


@dataclass(frozen=True, slots=True)
class MeterSettings:
    """How often the API processes flush their meters (``QUEUECORE_USAGE_FLUSH_S``)."""

    flush_s: int = 5

    @classmethod
    def from_env(cls) -> MeterSettings:
        """Read and validate: 1 s to 5 min (the most a crash may lose)."""
        return cls(_int("USAGE_FLUSH_S", 5, 1, 300))


@_cached
def meter() -> MeterSettings:
    """The process's meter settings."""
    return MeterSettings.from_env()


# local, local[4], local[*], local[4,2] (with task retries), or a cluster manager's URL.
_MASTER = re.compile(r"^(local(\[(\*|\d+)(,\d+)?\])?|(spark|k8s|mesos)://\S+|yarn)$")


@dataclass(frozen=True, slots=True)
class SparkSettings:
    """Where Spark runs and how many partitions its shuffles make."""

    master: str = "local[*]"
    shuffle_partitions: int = 4

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SparkSettings:
        """Read and validate ``QUEUECORE_SPARK_MASTER`` and ``QUEUECORE_SPARK_SHUFFLE_PARTITIONS``."""
        source = os.environ if env is None else env
        master = source.get(PREFIX + "SPARK_MASTER") or "local[*]"
        if not _MASTER.match(master):
            raise SettingsError(
                PREFIX + "SPARK_MASTER",
                f"must be local, local[N], local[*] or a spark://, k8s:// or yarn master, got {master!r}",
            )
        return cls(master, _partitions(source.get(PREFIX + "SPARK_SHUFFLE_PARTITIONS") or "4"))

    @property
    def local(self) -> bool:
        """Whether the executors run in this process's JVM, on this machine."""
        return self.master.startswith("local")


def _partitions(raw: str) -> int:
    # A lag window is small: Spark's default of 200 shuffle partitions would be 200 tiny tasks.
    variable = PREFIX + "SPARK_SHUFFLE_PARTITIONS"
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(variable, f"must be an integer, got {raw!r}") from None
    if not 1 <= value <= 10_000:
        raise SettingsError(variable, f"must be between 1 and 10000, got {value}")
    return value


@_cached
def spark() -> SparkSettings:
    """The process's Spark settings."""
    return SparkSettings.from_env()


@dataclass(frozen=True, slots=True)
class CompactionSettings:
    """Which blocks are merged, and how big an output object gets (``QUEUECORE_COMPACTION_*``)."""

    min_age_s: int = 600
    small_object_bytes: int = 4 * MiB
    target_bytes: int = 32 * MiB
    max_blocks: int = 200_000

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CompactionSettings:
        """Read and validate."""
        return cls(
            min_age_s=_int("COMPACTION_MIN_AGE_S", 600, 0, 30 * 86_400, env),
            small_object_bytes=_int("COMPACTION_SMALL_OBJECT_BYTES", 4 * MiB, 1, 1024 * MiB, env),
            target_bytes=_int("COMPACTION_TARGET_BYTES", 32 * MiB, 1, 1024 * MiB, env),
            max_blocks=_int("COMPACTION_MAX_BLOCKS", 200_000, 2, 10_000_000, env),
        )


@_cached
def compaction() -> CompactionSettings:
    """The process's compaction settings."""
    return CompactionSettings.from_env()


DEFAULT_READ_CACHE_MAX_BYTES = 256 * MiB


@_cached
def read_cache_max_bytes() -> int:
    """``QUEUECORE_READ_CACHE_MAX_BYTES`` (default 256 MiB; 0 turns the cache off)."""
    return _int("READ_CACHE_MAX_BYTES", DEFAULT_READ_CACHE_MAX_BYTES, 0, 1 << 40)


def pulls_in_flight(pool_max: int, env: Mapping[str, str] | None = None) -> int:
    """``QUEUECORE_DELIVERY_PULLS_IN_FLIGHT``: lease statements (pulls, streams' pulls) one
    process runs at once, shared fairly between organisations (data_plane.delivery.shares);
    default three quarters of the pool, so publishes, acks and heartbeats always find a
    connection."""
    return _int("DELIVERY_PULLS_IN_FLIGHT", max(1, pool_max * 3 // 4), 1, pool_max, env)


DEFAULT_ORPHAN_GRACE_S = 15 * 60


@_cached
def orphan_grace_s() -> int:
    """``QUEUECORE_ORPHAN_GRACE_S``: how old an unreferenced object must be to be deleted."""
    return _int("ORPHAN_GRACE_S", DEFAULT_ORPHAN_GRACE_S, 0, 30 * 86_400)


@dataclass(frozen=True, slots=True)
class GreptimeSettings:
    """Row series to GreptimeDB over gRPC (``greptimedb-ingester``); off when no address is set."""

    grpc_address: str | None
    database: str = "public"
    queue_rows: int = 10_000
    batch_rows: int = 500
    snapshot_s: int = 60  # how often an API process sends its producer rows

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> GreptimeSettings:
        """Read and validate."""
        address = _env("GREPTIMEDB_GRPC", env=env)
        if address is not None and not re.fullmatch(r"[^\s:/]+:\d{1,5}", address):
            raise SettingsError(PREFIX + "GREPTIMEDB_GRPC", f"must be host:port, got {address!r}")
        return cls(
            grpc_address=address,
            database=_env("GREPTIMEDB_DATABASE", "public", env) or "public",
            queue_rows=_int("GREPTIMEDB_QUEUE_ROWS", 10_000, 1, 1_000_000, env),
            batch_rows=_int("GREPTIMEDB_BATCH_ROWS", 500, 1, 100_000, env),
            snapshot_s=_int("GREPTIMEDB_SNAPSHOT_S", 60, 1, 3600, env),
        )


@_cached
def greptime() -> GreptimeSettings:
    """The GreptimeDB row-series settings of this process."""
    return GreptimeSettings.from_env()


# --- latency triage and the writer's phase timings (appended as one block) ---------------------


@dataclass(frozen=True, slots=True)
class TriageSettings:
    """Slow-publish triage (``QUEUECORE_TRIAGE_*``) and the writer's timing log interval."""

    slow_ms: int = 0
    max_per_s: int = 10
    timings_log_s: float = 0.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TriageSettings:
        """Read and validate; ``QUEUECORE_TRIAGE_SLOW_MS`` 0 or unset turns triage off."""
        return cls(
            slow_ms=_int("TRIAGE_SLOW_MS", 0, 0, 600_000, env),
            max_per_s=_int("TRIAGE_MAX_PER_S", 10, 1, 10_000, env),
            timings_log_s=_int("WRITER_TIMINGS_MS", 0, 0, 3_600_000, env) / 1000,
        )


@_cached
def triage() -> TriageSettings:
    """The process's triage settings."""
    return TriageSettings.from_env()


@dataclass(frozen=True, slots=True)
class DataPlaneSettings:
    """What a process's data plane is built with: its constructor reads no setting itself."""

    database_url: str
    writer: WriterSettings
    triage: TriageSettings
    greptime: GreptimeSettings
    webhooks: WebhookSettings
    read_cache_max_bytes: int
    push: PushSettings
    traffic_flush_s: int  # how often the per-topic traffic counters are written
    orphan_grace_s: int
    pulls_in_flight: int = 7  # lease statements at once (three quarters of a pool of 10)

    @classmethod
    def from_env(cls) -> DataPlaneSettings:
        """The process's settings for its data plane."""
        return cls(
            database_url=database().url,
            writer=writer(),
            triage=triage(),
            greptime=greptime(),
            webhooks=webhooks(),
            read_cache_max_bytes=read_cache_max_bytes(),
            push=push(),
            traffic_flush_s=meter().flush_s,
            orphan_grace_s=orphan_grace_s(),
            pulls_in_flight=pulls_in_flight(database().pool_max),
        )


SMTP_SECURITY = ("starttls", "tls", "none")
DEFAULT_SENDER = "QueueCore <queuecore@localhost>"


@dataclass(frozen=True, slots=True)
class MailSettings:
    """Outgoing email (invitations, password resets) over SMTP; off when no host is set."""

    host: str | None = None
    port: int = 587
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    sender: str = DEFAULT_SENDER
    security: str = "starttls"  # starttls on a plain port, tls from the first byte, or none
    timeout_s: int = 10

    @property
    def enabled(self) -> bool:
        """Whether QueueCore can send email at all."""
        return self.host is not None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> MailSettings:
        """Read and validate; a username needs a password and a sender an address."""
        username, password = _env("SMTP_USERNAME", env=env), _env("SMTP_PASSWORD", env=env)
        if (username is None) != (password is None):
            raise SettingsError(
                PREFIX + "SMTP_PASSWORD", "set both QUEUECORE_SMTP_USERNAME and it, or neither"
            )
        sender = _env("SMTP_FROM", DEFAULT_SENDER, env) or DEFAULT_SENDER
        if "@" not in sender or any(c in sender for c in "\r\n"):
            raise SettingsError(PREFIX + "SMTP_FROM", f"must be an email address, got {sender!r}")
        return cls(
            host=_env("SMTP_HOST", env=env),
            port=_port("SMTP_PORT", 587, env),
            username=username,
            password=password,
            sender=sender,
            security=_choice("SMTP_SECURITY", "starttls", SMTP_SECURITY, env),
            timeout_s=_int("SMTP_TIMEOUT_S", 10, 1, 120, env),
        )


@_cached
def mail() -> MailSettings:
    """The process's outgoing-email settings."""
    return MailSettings.from_env()


@_cached
def signup_open() -> bool:
    """``QUEUECORE_SIGNUP``: whether anyone may create an account and organisation on the
    dashboard (true, the default); invitations work either way."""
    return _bool("SIGNUP", True)
