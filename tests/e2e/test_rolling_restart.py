"""``queuecore serve`` replicas on SIGTERM: not ready ("draining") first, then a bounded exit in
which waiting long-polls and streams answer at once; and two replicas restarted one after the
other under publish and consume load, losing nothing."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from infra.embedded import free_port_block
from tests.support.processes import http_status, queuecore, wait_for
from tests.support.rolling import Load, ServeReplica
from tests.support.services import Services
from tests.support.tenancy import new_organisation

pytestmark = pytest.mark.e2e

DRAIN_S = 2
TIMEOUT_S = 5
STOP_SLACK_S = 3.0  # the lifespan's close (writer flush, pools) and process exit on a busy box
RECONNECT = ("error", {"code": "SERVICE_UNAVAILABLE", "message": "server shutting down, reconnect"})


def _readyz(base: str) -> tuple[int, str]:
    response = httpx.get(f"{base}/readyz", timeout=2)
    return response.status_code, response.text


def test_sigterm_fails_readiness_while_draining_then_exits_in_bound(
    services: Services, tmp_path: Path
) -> None:
    port, log = free_port_block(), tmp_path / "serve.log"
    env = {
        **services.env(),
        "QUEUECORE_HTTP_PORT": str(port),
        "QUEUECORE_SHUTDOWN_DRAIN_S": str(DRAIN_S),
        "QUEUECORE_SHUTDOWN_TIMEOUT_S": str(TIMEOUT_S),
    }
    proc = queuecore(["serve", "--workers", "2"], env, log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: http_status(f"{base}/readyz") == 200, 60, "api ready", proc, log)
        client = _client(base, services)
        busy = Stream(client, "drain.t", "g")  # gets a message during the drain
        idle = Stream(client, "idle.t", "g")  # gets nothing: only the drain's end wakes it
        long_poll = LongPoll(client, "idle.t", "p", wait_ms=30_000)
        time.sleep(0.5)  # the streams and the long-poll are waiting before the replica drains
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        status, body = _readyz(base)
        while status == 200 and time.monotonic() - started < DRAIN_S / 2:
            time.sleep(0.05)  # the supervisor forwards SIGTERM to its workers
            status, body = _readyz(base)
        assert status == 503  # still serving during the pre-stop delay, but not ready
        assert "draining" in json.loads(body)["error"]["message"]
        assert http_status(f"{base}/healthz") == 200
        # A publish during the drain is answered; the open stream delivers it. The answer closes
        # its connection: the client's next one goes through the balancer to a ready replica.
        published = client.post("/v1/topics/drain.t/messages", json={"data": 1})
        assert published.status_code == 201
        assert published.headers["connection"] == "close"
        proc.wait(timeout=DRAIN_S + TIMEOUT_S + 10)
        stopped_s = time.monotonic() - started
        assert stopped_s >= DRAIN_S - 0.5  # kept serving for the drain
        # Nothing waited out its keep-alive or its wait: the drain's end answered them.
        assert stopped_s <= DRAIN_S + STOP_SLACK_S
        assert long_poll.answer == (200, {"messages": []})
        assert DRAIN_S - 0.5 <= long_poll.answered_s - (started - long_poll.opened) <= DRAIN_S + 2
        assert "message" in busy.kinds()
        for stream in (busy, idle):
            assert stream.retry_ms == [1000]  # sent first, for EventSource reconnects
            assert stream.events[-1] == RECONNECT
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _client(base: str, services: Services) -> httpx.Client:
    """A client of a fresh Pro organisation, with topics ``drain.t`` and ``idle.t``."""
    org = new_organisation(services.database_url, tier="pro")
    headers = {"Authorization": f"Bearer {org.keys['production'].secret}"}
    client = httpx.Client(base_url=base, headers=headers, timeout=40)
    for topic in ("drain.t", "idle.t"):
        assert client.post("/v1/topics", json={"name": topic, "partitions": 1}).status_code == 201
    return client


def _join(client: httpx.Client, topic: str, group: str) -> str:
    response = client.put(f"/v1/topics/{topic}/groups/{group}", json={"startFrom": "earliest"})
    assert response.status_code == 200
    return str(
        client.post(f"/v1/topics/{topic}/groups/{group}/members", json={}).json()["memberId"]
    )


class Stream:
    """A group member's SSE stream read by a thread: its events and ``retry:`` fields."""

    def __init__(self, client: httpx.Client, topic: str, group: str) -> None:
        member = _join(client, topic, group)
        self.url = f"/v1/topics/{topic}/groups/{group}/members/{member}/stream"
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.retry_ms: list[int] = []
        threading.Thread(target=self._listen, args=(client,), daemon=True).start()

    def kinds(self) -> list[str]:
        """The event types received, in order."""
        return [kind for kind, _ in self.events]

    def _listen(self, client: httpx.Client) -> None:
        kind = ""
        with client.stream("GET", self.url, timeout=40) as response:
            for line in response.iter_lines():
                if line.startswith("retry:"):
                    self.retry_ms.append(int(line[6:]))
                elif line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:"):
                    self.events.append((kind, json.loads(line[5:])))


class LongPoll:
    """One pull waiting up to ``wait_ms`` for messages, run by a thread."""

    def __init__(self, client: httpx.Client, topic: str, group: str, wait_ms: int) -> None:
        member = _join(client, topic, group)
        url = f"/v1/topics/{topic}/groups/{group}/members/{member}/pull"
        self.answer: tuple[int, Any] | None = None
        self.answered_s = 0.0  # after it was sent
        self.opened = time.monotonic()
        threading.Thread(target=self._pull, args=(client, url, wait_ms), daemon=True).start()

    def _pull(self, client: httpx.Client, url: str, wait_ms: int) -> None:
        response = client.post(url, json={"maxMessages": 10, "waitMs": wait_ms})
        self.answered_s = time.monotonic() - self.opened
        self.answer = (response.status_code, response.json())


ROLLING_DRAIN_S = 1
ROLLING_TIMEOUT_S = 3
ROLLING_SLACK_S = 2.0


def test_two_replicas_restarted_one_after_the_other_under_load_lose_nothing(
    services: Services, tmp_path: Path
) -> None:
    env = {
        **services.env(),
        "QUEUECORE_SHUTDOWN_DRAIN_S": str(ROLLING_DRAIN_S),
        "QUEUECORE_SHUTDOWN_TIMEOUT_S": str(ROLLING_TIMEOUT_S),
    }
    pair = [ServeReplica(name, env, tmp_path) for name in ("a", "b")]
    load: Load | None = None
    try:
        for replica in pair:
            replica.start()
        for replica in pair:
            replica.wait_ready()
        load = _load([replica.url for replica in pair], services)
        time.sleep(2)  # steady load before the first restart
        stops = [_restart(replica, load) for replica in pair]
        time.sleep(1)  # load on the restarted pair
        load.stop_producing(["producer-1", "producer-2"])
        deadline = time.monotonic() + 30  # a lease lost in a switch comes back after ackTimeout
        while load.ledger.missing() and time.monotonic() < deadline:
            time.sleep(0.2)
        waited_s = time.monotonic() - deadline + 30
        load.finish()
        print(_summary(load, waited_s))
        _assert_nothing_lost(load)
        for stop_s, readiness in stops:
            assert "draining" in readiness
            assert (
                ROLLING_DRAIN_S - 0.2
                <= stop_s
                <= ROLLING_DRAIN_S + ROLLING_TIMEOUT_S + ROLLING_SLACK_S
            )
        print(
            f"replica stop times under load (SIGTERM to exit): {[round(s, 2) for s, _ in stops]} s"
        )
    finally:
        if load is not None:
            load.finish(timeout_s=2)
        for replica in pair:
            replica.stop()


def _load(urls: list[str], services: Services) -> Load:
    """Two producers, a streaming and a pulling member of one group, on an exactly-once topic."""
    org = new_organisation(services.database_url, tier="pro")
    load = Load(urls, {"Authorization": f"Bearer {org.keys['production'].secret}"}, "roll.t", "g")
    admin = load.balancer()
    topic = {"name": "roll.t", "partitions": 4, "delivery": "exactly-once"}
    assert admin.request("POST", "/v1/topics", topic).status_code == 201
    group = {"startFrom": "earliest", "ackTimeout": "15s"}
    assert admin.request("PUT", "/v1/topics/roll.t/groups/g", group).status_code == 200
    join = "/v1/topics/roll.t/groups/g/members"
    members = [admin.request("POST", join, {}).json()["memberId"] for _ in range(2)]
    admin.close()
    load.run("producer-1", load.produce("p1", batch=5, pause_s=0.02), start=0)
    load.run("producer-2", load.produce("p2", batch=5, pause_s=0.02), start=1)
    load.run("streamer", load.stream(members[0]), start=0)
    load.run("puller", load.pull(members[1], wait_ms=2000), start=1)
    return load


def _restart(replica: ServeReplica, load: Load) -> tuple[float, str]:
    """SIGTERM, wait for the exit, start again, wait until ready; (stop seconds, readiness)."""
    load.journal.window_opens(replica.url)
    replica.sigterm()
    started = time.monotonic()
    status, readiness = replica.readyz()
    while status == 200 and time.monotonic() - started < ROLLING_DRAIN_S:
        time.sleep(0.05)
        status, readiness = replica.readyz()
    replica.process.wait(timeout=ROLLING_DRAIN_S + ROLLING_TIMEOUT_S + 20)
    stop_s = time.monotonic() - started
    replica.start()
    replica.wait_ready()
    load.journal.window_closes(replica.url)
    return stop_s, readiness


def _assert_nothing_lost(load: Load) -> None:
    ledger, journal = load.ledger, load.journal
    assert not journal.failures
    assert not journal.unexpected()
    assert not journal.outside_windows()  # errors only from the replica being restarted
    assert len(ledger.published) >= 100  # there was load
    for start, end in [w for windows in journal.windows.values() for w in windows]:
        assert any(start <= t <= end for t in ledger.published_at)  # publishing went on
    assert not ledger.mismatched  # a retried key was answered with its first place
    assert not ledger.missing()  # every publish answered 2xx was delivered and acked
    assert not ledger.after_ack  # nothing came again once its ack was accepted
    assert ledger.deliveries == len(ledger.published)  # no lease was lost in a switch either
    ids = [data_id for data_ids in ledger.delivered.values() for data_id in data_ids]
    assert len(ids) == len(set(ids)) == len(ledger.published)  # no key stored twice
    assert {url for _, url in load.stream_ends} == set(load.urls)  # each drain ended the stream
    assert load.retry_ms_seen == {1000}


def _summary(load: Load, waited_s: float) -> str:
    """What the clients did and saw, for the test's output."""
    ledger, journal = load.ledger, load.journal
    seen: dict[str, int] = {}
    for _, _, what in journal.errors:
        seen[what] = seen.get(what, 0) + 1
    return (
        f"published {len(ledger.published)}, deliveries {ledger.deliveries}, "
        f"acked {len(ledger.acked)}, last acks {waited_s:.1f}s after publishing stopped; "
        f"windows {journal.windows}; client errors {seen}"
    )
