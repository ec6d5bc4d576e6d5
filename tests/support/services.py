"""The real services the suite runs against: embedded ones started once, or ones named by URL."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from infra.embedded import (
    EmbeddedPostgres,
    EmbeddedRedis,
    EmbeddedS3,
    EmbeddedService,
    free_port_block,
)

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def unavailable(reason: str) -> None:
    """Skip on a laptop, fail in CI: under ``CI=true`` a missing service or tool is an error."""
    if IN_CI:
        pytest.fail(f"required service or tool unavailable in CI: {reason}")
    pytest.skip(reason)


@contextmanager
def dedicated_postgres(root: Path) -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL of the test's own, migrated, that it may stop, freeze or crash (the
    session's shared one is never disturbed); stopped afterwards."""
    from infra import migrate

    postgres = EmbeddedPostgres(root / "postgres", root / "logs", free_port_block())
    try:
        postgres.start()
        migrate.apply(postgres.url)
    except Exception as exc:
        postgres.stop()
        unavailable(f"a dedicated PostgreSQL: {exc}")
    try:
        yield postgres
    finally:
        postgres.stop()


@dataclass
class Services:
    """URLs of PostgreSQL, S3 and Redis for this test session, as ``QUEUECORE_*`` variables."""

    database_url: str
    redis_url: str
    s3_endpoint: str | None
    object_store_url: str
    started: list[EmbeddedService] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        """The variables a QueueCore process needs to use these services."""
        env = {
            "QUEUECORE_DATABASE_URL": self.database_url,
            "QUEUECORE_REDIS_URL": self.redis_url,
            "QUEUECORE_OBJECT_STORE_URL": self.object_store_url,
            # Webhook receivers in tests listen on 127.0.0.1; a short backoff keeps retries quick.
            "QUEUECORE_WEBHOOKS_ALLOW_PRIVATE": "true",
            "QUEUECORE_WEBHOOK_RETRY_BASE_MS": "500",
            # A test's server stops at once on SIGTERM; the drain itself is tested with its own value.
            "QUEUECORE_SHUTDOWN_DRAIN_S": "0",
            # Push signing secrets are sealed with it (core.sealed), as in production.
            "QUEUECORE_SECRETS_KEY": "test-secrets-key-0123456789abcdefghij",
        }
        if self.s3_endpoint:
            env["QUEUECORE_S3_ENDPOINT_URL"] = self.s3_endpoint
        return env

    def stop(self) -> None:
        """Stop what this session started."""
        for service in reversed(self.started):
            service.stop()


def start_services(root: Path) -> Services:
    """Use services named in the environment, start embedded ones for the rest."""
    started: list[EmbeddedService] = []
    logs = root / "logs"
    database_url = os.environ.get("QUEUECORE_DATABASE_URL")
    if not database_url:
        pg = EmbeddedPostgres(root / "postgres", logs, free_port_block())
        _start(pg, started)
        database_url = pg.url
    redis_url = os.environ.get("QUEUECORE_REDIS_URL")
    if not redis_url:
        rd = EmbeddedRedis(root / "redis", logs, free_port_block())
        _start(rd, started)
        redis_url = rd.url
    object_store_url = os.environ.get("QUEUECORE_OBJECT_STORE_URL")
    s3_endpoint = os.environ.get("QUEUECORE_S3_ENDPOINT_URL")
    if not object_store_url:
        s3 = EmbeddedS3(root / "s3", logs, free_port_block(8), "queuecore-test")
        _start(s3, started)
        object_store_url, s3_endpoint = "s3://queuecore-test", s3.endpoint_url
    return Services(database_url, redis_url, s3_endpoint, object_store_url, started)


def _start(service: EmbeddedService, started: list[EmbeddedService]) -> None:
    began = time.monotonic()
    try:
        service.start()
    except Exception as exc:
        for other in started:
            other.stop()
        unavailable(f"could not start embedded {service.name}: {exc}")
    started.append(service)
    print(f"started {service.name} in {time.monotonic() - began:.1f}s")
