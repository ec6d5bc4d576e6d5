"""A Go consumer streaming from an API process that is killed and restarted on its port.

The member's session timeout (2 s) is shorter than the outage: the consumer reconnects (as the
same member, or a new one if it was evicted) and keeps acking; on an exactly-once topic no
message is processed again after the server accepted its ack.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from infra.embedded import free_port_block
from tests.sdk.test_go import GO_DIR, go_command, go_env
from tests.support.processes import http_status, queuecore, stop, wait_for
from tests.support.services import Services
from tests.support.tenancy import new_organisation

MESSAGES_PER_PHASE = 40


class RestartableAPI:
    """One ``queuecore serve`` process that can be SIGKILLed and started again on its port."""

    def __init__(self, services: Services, logs: Path) -> None:
        self.port = free_port_block()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**services.env(), "QUEUECORE_HTTP_PORT": str(self.port)}
        self.logs = logs
        self.starts = 0
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start a process and wait until it is ready."""
        self.starts += 1
        log = self.logs / f"serve-{self.starts}.log"
        self.process = queuecore(["serve", "--workers", "1"], self.env, log)
        wait_for(
            lambda: http_status(f"{self.url}/readyz") == 200, 90, "api ready", self.process, log
        )

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, open streams break mid-way."""
        assert self.process is not None
        stop(self.process, signal.SIGKILL)


@pytest.fixture
def restartable_api(services: Services, tmp_path: Path) -> Iterator[RestartableAPI]:
    """A restartable API process; stopped at the end."""
    api = RestartableAPI(services, tmp_path)
    api.start()
    yield api
    if api.process is not None:
        stop(api.process)


@pytest.fixture
def consumer_binary(tmp_path: Path) -> Path:
    """The Go test consumer, built once for the test."""
    target = tmp_path / "testconsumer"
    built = subprocess.run(
        [go_command(), "build", "-o", str(target), "./internal/testconsumer"],
        cwd=GO_DIR,
        env=go_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if built.returncode != 0:
        pytest.fail(f"go build failed:\n{built.stdout}\n{built.stderr}")
    return target


def lines(path: Path) -> list[dict[str, Any]]:
    """The consumer's JSON lines so far (a torn last line is left for later)."""
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def settled(path: Path) -> set[tuple[int, int]]:
    """(partition, offset) of every message whose ack the server accepted, or may have.

    An ack whose answer was lost in the kill is reported as failed yet may have been
    committed, and then the message is rightly never delivered again.
    """
    kinds = {"acked", "ack_failed"}
    return {(e["partition"], e["offset"]) for e in lines(path) if e["event"] in kinds}


def lag(http: httpx.Client, topic: str, group: str) -> int | None:
    """The group's total lag, or None while the API does not answer."""
    try:
        answer = http.get(f"/v1/topics/{topic}/groups/{group}/offsets")
    except httpx.TransportError:
        return None
    return sum(p["lag"] for p in answer.json()["partitions"]) if answer.status_code == 200 else None


def publish(http: httpx.Client, topic: str, start: int) -> None:
    """One batch of MESSAGES_PER_PHASE messages."""
    batch = [{"data": {"n": start + i}} for i in range(MESSAGES_PER_PHASE)]
    answer = http.post(f"/v1/topics/{topic}/messages/batch", json={"messages": batch})
    assert answer.status_code == 201, answer.text


@pytest.mark.e2e
def test_go_consumer_survives_an_api_kill_and_restart(
    services: Services, restartable_api: RestartableAPI, consumer_binary: Path, tmp_path: Path
) -> None:
    org = new_organisation(services.database_url, tier="pro")
    key = org.keys["production"].secret
    http = httpx.Client(
        base_url=restartable_api.url, headers={"Authorization": f"Bearer {key}"}, timeout=30
    )
    topic, group = "restart.orders", "restart-workers"
    created = http.post("/v1/topics", json={"name": topic, "partitions": 2})
    assert created.status_code == 201, created.text
    config = {"startFrom": "earliest", "ackTimeout": "5s"}
    assert http.put(f"/v1/topics/{topic}/groups/{group}", json=config).status_code == 200
    publish(http, topic, 0)

    out = tmp_path / "consumer.jsonl"
    env = go_env({"QUEUECORE_URL": restartable_api.url, "QUEUECORE_API_KEY": key})
    with out.open("w") as sink:
        consumer = subprocess.Popen(
            [str(consumer_binary), "--topic", topic, "--group", group, "--session-timeout", "2s"],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: len(settled(out)) == MESSAGES_PER_PHASE, 60, "first acks", consumer, out)
        restartable_api.kill()
        time.sleep(3.0)  # longer than the session: the member is forgotten meanwhile
        restartable_api.start()
        publish(http, topic, MESSAGES_PER_PHASE)
        total = 2 * MESSAGES_PER_PHASE
        wait_for(
            lambda: lag(http, topic, group) == 0, 90, "all acked after the restart", consumer, out
        )
    finally:
        stop(consumer)
        http.close()

    events = lines(out)
    kinds = [e["event"] for e in events]
    assert "disconnected" in kinds and "reconnecting" in kinds, kinds
    assert kinds.count("connected") >= 2, "it connected again after the restart"
    # Not asserted: a rejoin as a new member. While no replica runs, nobody can heartbeat, and the
    # API's pulse makes the outage not count as the member's silence (docs/faults.md).
    done: set[tuple[int, int]] = set()
    processed: set[tuple[int, int]] = set()
    for event in events:
        if "offset" not in event:
            continue
        where = (int(event["partition"]), int(event["offset"]))
        if event["event"] == "processed":
            assert where not in done, f"{where} processed again after its ack was accepted"
            processed.add(where)
        elif event["event"] == "acked":
            done.add(where)
    assert len(processed) == total, "every message was processed"
    assert len(done) >= total - 2, "acks went on after the restart"
    assert consumer.returncode == 0, "SIGTERM stops the consumer gracefully"
