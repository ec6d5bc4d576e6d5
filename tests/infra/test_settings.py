"""Settings: validated at start-up; a bad value stops the process with one line naming it."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core import settings
from core.settings import (
    DatabaseSettings,
    DevStackSettings,
    HttpSettings,
    ObjectStoreSettings,
    SettingsError,
    TelemetrySettings,
    WebhookSettings,
)
from infra.layers import PACKAGES, ROOT


def test_object_store_url_gives_bucket_prefix_and_endpoint() -> None:
    s = ObjectStoreSettings.from_env(
        {
            "QUEUECORE_OBJECT_STORE_URL": "s3://segments/prod/eu",
            "QUEUECORE_S3_ENDPOINT_URL": "http://127.0.0.1:9000",
        }
    )
    assert (s.bucket, s.prefix, s.endpoint_url, s.region) == (
        "segments",
        "prod/eu",
        "http://127.0.0.1:9000",
        "us-east-1",
    )


@pytest.mark.parametrize(
    ("loader", "env", "variable"),
    [
        (DatabaseSettings.from_env, {}, "QUEUECORE_DATABASE_URL"),
        (
            DatabaseSettings.from_env,
            {"QUEUECORE_DATABASE_URL": "mysql://x/y"},
            "QUEUECORE_DATABASE_URL",
        ),
        (
            ObjectStoreSettings.from_env,
            {"QUEUECORE_OBJECT_STORE_URL": "s3://ab"},
            "QUEUECORE_OBJECT_STORE_URL",
        ),
        (
            ObjectStoreSettings.from_env,
            {"QUEUECORE_OBJECT_STORE_URL": "s3://abc", "QUEUECORE_S3_ENDPOINT_URL": "ftp://x"},
            "QUEUECORE_S3_ENDPOINT_URL",
        ),
        (HttpSettings.from_env, {"QUEUECORE_HTTP_PORT": "eighty"}, "QUEUECORE_HTTP_PORT"),
        (HttpSettings.from_env, {"QUEUECORE_HTTP_PORT": "70000"}, "QUEUECORE_HTTP_PORT"),
        (DevStackSettings.from_env, {"QUEUECORE_DEV_S3_PORT": "65530"}, "QUEUECORE_DEV_S3_PORT"),
        (
            TelemetrySettings.from_env,
            {"QUEUECORE_OTLP_HEADERS": "novalue"},
            "QUEUECORE_OTLP_HEADERS",
        ),
        (
            WebhookSettings.from_env,
            {"QUEUECORE_WEBHOOKS_ALLOW_PRIVATE": "sometimes"},
            "QUEUECORE_WEBHOOKS_ALLOW_PRIVATE",
        ),
        (
            WebhookSettings.from_env,
            {"QUEUECORE_WEBHOOK_MAX_ATTEMPTS": "0"},
            "QUEUECORE_WEBHOOK_MAX_ATTEMPTS",
        ),
    ],
)
def test_bad_values_name_the_variable(loader: object, env: dict[str, str], variable: str) -> None:
    with pytest.raises(SettingsError) as info:
        loader(env)  # type: ignore[operator]
    assert info.value.variable == variable
    assert str(info.value).startswith(variable)


def test_webhooks_refuse_private_addresses_unless_told_otherwise() -> None:
    assert WebhookSettings.from_env({}).allow_private is False
    allowed = WebhookSettings.from_env({"QUEUECORE_WEBHOOKS_ALLOW_PRIVATE": "TRUE"})
    assert allowed.allow_private is True


def test_otlp_headers_are_parsed() -> None:
    s = TelemetrySettings.from_env(
        {
            "QUEUECORE_OTLP_ENDPOINT": "http://127.0.0.1:4000/v1/otlp",
            "QUEUECORE_OTLP_HEADERS": "x-greptime-db-name=public, authorization=Basic abc=",
        }
    )
    assert s.otlp_headers == {"x-greptime-db-name": "public", "authorization": "Basic abc="}


@pytest.mark.parametrize("command", ["serve", "worker", "migrate"])
def test_process_with_bad_setting_exits_with_one_clear_line(command: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUECORE_")}
    env.update(
        {
            "QUEUECORE_DATABASE_URL": "not-a-url",
            "QUEUECORE_REDIS_URL": "redis://127.0.0.1:1/0",
            "QUEUECORE_OBJECT_STORE_URL": "s3://bucket",
        }
    )
    result = subprocess.run(
        [sys.executable, "-m", "infra.cli", command],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [
        "queuecore: configuration error: QUEUECORE_DATABASE_URL: must be a postgresql/postgres URL, got 'not-a-url'"
    ]


def variables_read(root: Path) -> set[str]:
    """Every environment variable the server's packages read: the settings loaders' names, the
    ``PREFIX + …`` and ``QUEUECORE_…`` literals, and ``os.environ.get`` / ``os.getenv`` keys."""
    readers = {"_env", "_required", "_int", "_ratio", "_bool", "_port", "_choice"}
    found = set()
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and node.args:
                    name, first = ast.unparse(node.func), node.args[0]
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        if name in readers:
                            found.add(settings.PREFIX + first.value)
                        elif name in {"os.environ.get", "os.getenv", "environ.get"}:
                            found.add(first.value)
                elif (
                    isinstance(node, ast.BinOp)
                    and ast.unparse(node.left) == "PREFIX"
                    and isinstance(node.right, ast.Constant)
                    and re.fullmatch(r"[A-Z0-9_]+", str(node.right.value))
                ):
                    found.add(settings.PREFIX + str(node.right.value))
                elif isinstance(node, ast.Constant) and re.fullmatch(
                    r"QUEUECORE_[A-Z0-9_]+", str(node.value)
                ):
                    found.add(str(node.value))
    return found


def test_every_variable_the_code_reads_is_in_the_readme_configuration_table() -> None:
    readme = (ROOT / "README.md").read_text()
    table = readme[
        readme.index("## Configuration") : readme.index(
            "\n## ", readme.index("## Configuration") + 1
        )
    ]
    read = variables_read(ROOT)
    assert {"QUEUECORE_DATABASE_URL", "QUEUECORE_S3_PUT_THREADS", "QUEUECORE_SPARK_MASTER"} <= read
    assert sorted(name for name in read if f"`{name}`" not in table) == []
