"""Consumers as separate processes against a real API process: SSE push, and a kill -9 mid-stream."""

from __future__ import annotations

import collections
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.support.processes import wait_for
from tests.support.services import Services
from tests.support.tenancy import new_organisation

pytestmark = pytest.mark.e2e


def setup_topic(base: str, key: str, name: str, partitions: int, **group: object) -> httpx.Client:
    client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert (
        client.post("/v1/topics", json={"name": name, "partitions": partitions}).status_code == 201
    )
    assert (
        client.put(
            f"/v1/topics/{name}/groups/g", json={"startFrom": "earliest", **group}
        ).status_code
        == 200
    )
    return client


def test_sse_stream_pushes_messages_as_they_are_published(api: str, services: Services) -> None:
    org = new_organisation(services.database_url, tier="pro")
    client = setup_topic(api, org.keys["production"].secret, "push.events", 2)
    member = client.post("/v1/topics/push.events/groups/g/members", json={}).json()["memberId"]
    received: list[dict[str, object]] = []

    def listen() -> None:
        with client.stream(
            "GET", f"/v1/topics/push.events/groups/g/members/{member}/stream", timeout=30
        ) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            for line in response.iter_lines():
                if line.startswith("data:"):
                    received.append(json.loads(line[5:]))
                    if len(received) == 5:
                        return

    reader = threading.Thread(target=listen, daemon=True)
    reader.start()
    time.sleep(0.5)  # the stream is open and idle before anything is published
    for i in range(5):
        assert (
            client.post(
                "/v1/topics/push.events/messages", json={"data": {"n": i}, "key": "k"}
            ).status_code
            == 201
        )
    reader.join(20)
    assert sorted(m["data"]["n"] for m in received) == [0, 1, 2, 3, 4]  # type: ignore[index]
    assert all(m["attempt"] == 1 and str(m["ackId"]).startswith("ack_") for m in received)
    acked = client.post(
        "/v1/topics/push.events/groups/g/ack", json={"ackIds": [m["ackId"] for m in received]}
    )
    assert len(acked.json()["acked"]) == 5


def test_a_stream_whose_member_left_ends_with_an_error_event(api: str, services: Services) -> None:
    org = new_organisation(services.database_url, tier="pro")
    client = setup_topic(api, org.keys["production"].secret, "push.gone", 1)
    member = client.post("/v1/topics/push.gone/groups/g/members", json={}).json()["memberId"]
    events: list[tuple[str, dict[str, object]]] = []

    def listen() -> None:
        kind = ""
        with client.stream(
            "GET", f"/v1/topics/push.gone/groups/g/members/{member}/stream", timeout=30
        ) as response:
            for line in response.iter_lines():
                if line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:"):
                    events.append((kind, json.loads(line[5:])))

    reader = threading.Thread(target=listen, daemon=True)
    reader.start()
    time.sleep(0.5)
    assert client.post("/v1/topics/push.gone/messages", json={"data": 1}).status_code == 201
    # Leave only once the first message has arrived: a leave before its delivery would rightly
    # end the stream with the error alone (CI once deleted the member 18 ms after the publish).
    deadline = time.monotonic() + 10
    while not events and time.monotonic() < deadline:
        time.sleep(0.01)
    assert client.delete(f"/v1/topics/push.gone/groups/g/members/{member}").status_code == 204
    # The next publish wakes the stream; its member is gone, so it says why and ends.
    assert client.post("/v1/topics/push.gone/messages", json={"data": 2}).status_code == 201
    reader.join(20)
    assert not reader.is_alive(), "the stream did not end"
    assert [kind for kind, _ in events] == ["message", "error"]
    assert events[0][1]["data"] == 1
    assert events[-1][1]["code"] == "MEMBER_NOT_FOUND"


def test_kill_9_of_one_consumer_leaves_every_message_acked_exactly_once(
    api: str, services: Services, tmp_path: Path
) -> None:
    org = new_organisation(services.database_url, tier="pro")
    key = org.keys["production"].secret
    client = setup_topic(api, key, "work.items", 4, ackTimeout="2s", sessionTimeout="3s")
    histories = [tmp_path / "a.log", tmp_path / "b.log"]
    consumers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.consumer_proc",
                api,
                key,
                "work.items",
                "g",
                str(path),
            ],
            stderr=path.with_suffix(".err").open("w"),
        )
        for path in histories
    ]
    total = 400
    try:
        # Both members own partitions before anything is published, so the first cannot find
        # the second has drained everything by the time it joins.
        wait_for(
            lambda: client.get("/v1/topics/work.items/groups/g").json()["consumers"] == 2,
            60,
            "both consumers joined",
            consumers[0],
            histories[0].with_suffix(".err"),
        )
        for batch in range(8):
            messages = [{"data": {"n": batch * 50 + i}} for i in range(50)]
            assert (
                client.post(
                    "/v1/topics/work.items/messages/batch", json={"messages": messages}
                ).status_code
                == 201
            )
            if batch == 3:
                # Kill it mid-stream: only once it has acked something of its own.
                wait_for(
                    lambda: histories[0].exists() and bool(histories[0].read_text()),
                    60,
                    "first consumer acking",
                    consumers[0],
                    histories[0].with_suffix(".err"),
                )
                consumers[0].send_signal(signal.SIGKILL)
            time.sleep(0.3)

        def drained() -> bool:
            offsets = client.get("/v1/topics/work.items/groups/g/offsets").json()["partitions"]
            return sum(p["lag"] for p in offsets) == 0

        wait_for(drained, 90, "all messages acked")
    finally:
        for proc in consumers:
            proc.kill()
            proc.wait(10)
    acks = collections.Counter(
        tuple(line.split()[1:])
        for path in histories
        if path.exists()
        for line in path.read_text().splitlines()
        if line.startswith("acked")
    )
    assert all(count == 1 for count in acks.values()), [k for k, c in acks.items() if c > 1][:5]
    # The killed consumer may have been killed with an ack request in flight: the server took
    # it, the process never read the answer. Those messages (its last request's, at most one
    # pull of 20) are the only ones allowed without an ``acked`` line.
    unanswered = _unanswered_acks(histories[0])
    ends = client.get("/v1/topics/work.items/groups/g/offsets").json()["partitions"]
    stored = {(str(row["partition"]), str(o)) for row in ends for o in range(row["latest"])}
    assert len(stored) == total
    missing = stored - set(acks)
    assert missing <= unanswered, f"never acked: {sorted(missing - unanswered)[:5]}"
    assert len(acks) + len(missing) == total
    dead = client.get("/v1/topics/work.items/groups/g/dlq").json()
    assert dead["depth"] == 0, dead
    assert histories[0].exists() and histories[0].read_text(), (
        "the killed consumer had acked some messages first"
    )


def _unanswered_acks(history: Path) -> set[tuple[str, ...]]:
    """The messages of the process's last ack request, when it recorded no answer to it."""
    last: list[tuple[str, ...]] = []
    answered = True
    for line in history.read_text().splitlines():
        kind, *where = line.split()
        if kind == "acking":
            last = [] if answered else last
            answered = False
            last.append(tuple(where))
        elif kind == "acked":
            answered = True
    return set() if answered else set(last)


def test_a_stream_at_its_in_flight_limit_goes_on_as_soon_as_it_acks(
    api: str, services: Services
) -> None:
    # A long session and ack timeout: without a wake-up on ack the stream would wait for its
    # keepalive or a third of its 60 s session before pulling again.
    org = new_organisation(services.database_url, tier="pro")
    client = setup_topic(
        api, org.keys["production"].secret, "room.events", 1, maxInFlight=5, ackTimeout="10m"
    )
    base = "/v1/topics/room.events/groups/g"
    member = client.post(f"{base}/members", json={"sessionTimeout": "60s"}).json()["memberId"]
    published = [{"data": {"n": n}} for n in range(10)]
    assert client.post("/v1/topics/room.events/messages/batch", json={"messages": published})
    seen: list[tuple[float, dict[str, object]]] = []

    def listen() -> None:
        with client.stream("GET", f"{base}/members/{member}/stream", timeout=60) as response:
            for line in response.iter_lines():
                if line.startswith("data:"):
                    message = json.loads(line[5:])
                    seen.append((time.monotonic(), message))
                    if len(seen) == 5:  # the limit: ack them all at once
                        acks = [m["ackId"] for _, m in seen]
                        assert client.post(f"{base}/ack", json={"ackIds": acks}).status_code == 200
                    if len(seen) == 10:
                        return

    reader = threading.Thread(target=listen, daemon=True)
    reader.start()
    reader.join(timeout=30)
    assert len(seen) == 10, f"only {len(seen)} of 10 arrived: the stream did not wake on the ack"
    assert [m["data"] for _, m in seen] == [{"n": n} for n in range(10)]
    gap_s = seen[5][0] - seen[4][0]
    assert gap_s < 3, f"the second half came {gap_s:.1f} s after the first, not at the ack"


def test_a_newer_stream_of_a_member_takes_over_from_one_left_open(
    api: str, services: Services
) -> None:
    """A client that opened a new stream without closing the old connection (a leaked socket,
    a proxy that kept it) gets every message on the new one: the old stream leases no more."""
    org = new_organisation(services.database_url, tier="pro")
    key = org.keys["production"].secret
    client = setup_topic(api, key, "push.takeover", 1)
    member = client.post("/v1/topics/push.takeover/groups/g/members", json={}).json()["memberId"]
    path = f"/v1/topics/push.takeover/groups/g/members/{member}/stream"
    host, port = api.removeprefix("http://").split(":")
    left_open = socket.create_connection((host, int(port)), timeout=10)
    try:
        request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n\r\n"
        left_open.sendall(request.encode())
        assert left_open.recv(4096).startswith(b"HTTP/1.1 200")  # open, then never read again
        received: list[dict[str, object]] = []

        def read() -> None:
            with client.stream("GET", path, timeout=30) as response:
                for line in response.iter_lines():
                    if line.startswith("data:"):
                        received.append(json.loads(line[5:]))
                        if len(received) == 20:
                            return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        time.sleep(0.5)
        for n in range(20):
            answer = client.post("/v1/topics/push.takeover/messages", json={"data": n})
            assert answer.status_code == 201
            time.sleep(0.02)
        reader.join(30)
        assert [(m["data"], m["attempt"]) for m in received] == [(n, 1) for n in range(20)]
    finally:
        left_open.close()
