"""Telemetry of each process kind: off without an endpoint, a bad header setting stops start-up,
the Celery worker's task metrics, and beat's logs."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from celery import Celery

from tests.observability.conftest import exporting_env, serve
from tests.observability.receiver import OtlpReceiver
from tests.support.processes import queuecore, stop, wait_for
from tests.support.services import Services
from tests.support.tenancy import new_organisation

pytestmark = pytest.mark.e2e


def test_without_an_endpoint_nothing_is_sent_and_the_api_works(
    services: Services, receiver: OtlpReceiver, tmp_path: Path
) -> None:
    # The standard OTEL_* variables point at the receiver: QueueCore must not act on them.
    trap = {
        "QUEUECORE_OTLP_ENDPOINT": "",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.base_url,
        "OTEL_METRIC_EXPORT_INTERVAL": "200",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    }
    with serve(services, tmp_path / "serve.log", trap) as server:
        org = new_organisation(services.database_url)
        client = httpx.Client(
            base_url=server.url,
            headers={"Authorization": f"Bearer {org.keys['production'].secret}"},
            timeout=30,
        )
        assert client.post("/v1/topics", json={"name": "quiet"}).status_code == 201
        published = client.post("/v1/topics/quiet/messages", json={"data": 1})
        assert published.status_code == 201
        assert published.headers["X-Request-Id"].startswith("req_")
        assert client.put("/v1/topics/quiet/groups/g", json={"startFrom": "earliest"}).is_success
        member = client.post("/v1/topics/quiet/groups/g/members", json={}).json()["memberId"]
        pulled = client.post(f"/v1/topics/quiet/groups/g/members/{member}/pull", json={})
        assert len(pulled.json()["messages"]) == 1
        assert server.stop() in (0, -signal.SIGTERM)
    assert receiver.exports == []


def _run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUECORE_", "OTEL_"))}
    return subprocess.run(
        [sys.executable, "-m", "infra.cli", *command],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("command", [["serve"], ["worker"], ["beat"]])
def test_bad_otlp_headers_stop_start_up_with_one_clear_line(command: list[str]) -> None:
    credential = "c2VjcmV0LXZhbHVl"
    result = _run(
        command,
        {
            "QUEUECORE_DATABASE_URL": "postgresql://127.0.0.1:1/none",
            "QUEUECORE_REDIS_URL": "redis://127.0.0.1:1/0",
            "QUEUECORE_OBJECT_STORE_URL": "s3://bucket",
            "QUEUECORE_OTLP_ENDPOINT": "http://127.0.0.1:1/v1/otlp",
            "QUEUECORE_OTLP_HEADERS": f"X-Greptime-DB-Name=public,Authorization Basic {credential}",
        },
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "queuecore: configuration error: QUEUECORE_OTLP_HEADERS: "
        "must look like 'name=value,name2=value2'"
    ]
    assert credential not in result.stdout + result.stderr


def test_worker_pool_processes_export_task_metrics_and_flush_them_on_exit(
    services: Services, receiver: OtlpReceiver, tmp_path: Path
) -> None:
    # A Redis database of its own: no other worker of the session takes these tasks.
    redis_url = services.redis_url.rsplit("/", 1)[0] + "/7"
    env = {
        **services.env(),
        **exporting_env(receiver, interval_ms=600_000),  # only the exit flush can deliver
        "QUEUECORE_REDIS_URL": redis_url,
    }
    log = tmp_path / "worker.log"
    hostname = f"otlp-{secrets.token_hex(4)}@localhost"
    proc = queuecore(["worker", "--concurrency", "1", "--hostname", hostname], env, log)
    client = Celery("otlp-test", broker=redis_url, backend=redis_url)
    try:
        wait_for(lambda: "ready" in log.read_text(errors="replace"), 60, "worker", proc, log)
        ok = client.send_task("queuecore.ping", args=["t"])
        assert ok.get(timeout=30)["token"] == "t"
        failed = client.send_task("queuecore.ping", args=[])  # missing argument: TypeError
        with pytest.raises(Exception, match="token"):
            failed.get(timeout=30)
        assert receiver.of("metrics") == []
    finally:
        code = stop(proc)
    assert code == 0

    duration = "queuecore.task.duration"
    assert receiver.total(duration, task="queuecore.ping", state="SUCCESS") == 1
    assert receiver.total(duration, task="queuecore.ping", state="FAILURE") == 1
    failures = {"task": "queuecore.ping", "error.type": "TypeError"}
    assert receiver.total("queuecore.task.failures", **failures) == 1
    resource, _, _ = next(receiver.metric_points(duration))
    assert resource["queuecore.role"] == "worker"
    task_ids: set[Any] = {a.get("task_id") for a, _ in receiver.log_records()}
    assert ok.id in task_ids and failed.id in task_ids


def test_beat_exports_its_log_lines_with_its_role(
    services: Services, receiver: OtlpReceiver, tmp_path: Path
) -> None:
    log = tmp_path / "beat.log"
    env = {**services.env(), **exporting_env(receiver, interval_ms=600_000)}
    proc = queuecore(["beat", "--schedule", str(tmp_path / "schedule")], env, log)
    try:
        wait_for(lambda: "beat: Starting" in log.read_text(errors="replace"), 60, "beat", proc, log)
    finally:
        stop(proc)
    bodies = [record.body.string_value for _, record in receiver.log_records()]
    assert any(body.startswith("beat: Starting") for body in bodies), bodies
    export = receiver.of("logs")[0]
    roles = {
        kv.value.string_value
        for resource_logs in export.decoded.resource_logs
        for kv in resource_logs.resource.attributes
        if kv.key == "queuecore.role"
    }
    assert roles == {"beat"}
