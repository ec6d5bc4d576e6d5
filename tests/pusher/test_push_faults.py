"""The pusher under faults: killed with SIGKILL mid-flight (nothing is lost, and what it had
acked is never pushed again), and, in production mode, refusing private addresses."""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from core.errors import ValidationFailed
from data_plane.push.config import checked
from data_plane.service import PushConfigRequest
from tests.pusher.conftest import Api, eventually, start_pusher
from tests.support.processes import stop
from tests.support.push_receiver import Receiver, Reply
from tests.support.services import Services

pytestmark = pytest.mark.e2e


def test_a_pusher_killed_mid_flight_loses_nothing_and_repeats_no_acked_push(
    api: Api,
    receiver: Receiver,
    services: Services,
    tmp_path: Path,
    unique: Callable[[str], str],
) -> None:
    topic = api.topic(unique("push-kill"), partitions=2)
    path = f"/{topic}"
    receiver.scripts[path] = lambda *_: Reply(200, delay_s=0.25)
    first = start_pusher(services, tmp_path / "first.log")
    try:
        push = {"endpoint": receiver.url(path), "maxInFlight": 4}
        api.push_group(topic, "hooks", push, deadLetter={"maxRetries": 5, "retryDelay": "200ms"})
        sent = {api.publish(topic, {"n": n})["messageId"] for n in range(60)}
        receiver.wait_for(path, 30, timeout_s=30)
        first.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        first.wait(10)
    finally:
        stop(first)
    second = start_pusher(services, tmp_path / "second.log")
    try:
        eventually(lambda: api.lag(topic, "hooks") == 0, timeout_s=60, what="all delivered")
    finally:
        stop(second)
    pushes = receiver.at(path)
    assert {p.json()["messageId"] for p in pushes} == sent
    assert api.dead_letters(topic, "hooks")["depth"] == 0
    # Answered well before the kill: acked, so never pushed again (an exactly-once topic).
    settled = {p.json()["messageId"] for p in pushes if 0 < p.answered < killed_at - 1.0}
    assert settled, "nothing was answered before the kill"
    for message_id in settled:
        assert [p.json()["messageId"] for p in pushes].count(message_id) == 1, message_id
    repeated = [p for p in pushes if p.json()["attempt"] > 1]
    assert len(repeated) <= 8  # at most what the killed pusher held (its window, per partition)


def test_production_mode_refuses_private_addresses(
    api: Api,
    receiver: Receiver,
    services: Services,
    tmp_path: Path,
    unique: Callable[[str], str],
) -> None:
    for endpoint in ("https://127.0.0.1/x", "https://[::1]:8443/x", "http://example.com/x"):
        with pytest.raises(ValidationFailed) as refused:
            checked(PushConfigRequest(endpoint=endpoint), allow_private=False)
        assert refused.value.field == "push.endpoint"
    # A name is checked where it resolves, by the pusher, before it connects: this machine's
    # name resolves to a loopback or private address (/etc/hosts).
    host = socket.gethostname()
    topic = api.topic(unique("push-private"))
    path = f"/{topic}"
    endpoint = f"https://{host}:{receiver.port}{path}"
    checked(PushConfigRequest(endpoint=endpoint), allow_private=False)  # no lookup at PUT
    production = start_pusher(
        services, tmp_path / "pusher.log", {"QUEUECORE_WEBHOOKS_ALLOW_PRIVATE": "false"}
    )
    try:
        api.push_group(topic, "hooks", {"endpoint": endpoint}, deadLetter={"maxRetries": 0})
        api.publish(topic, {"n": 1})
        eventually(lambda: api.dead_letters(topic, "hooks")["depth"] == 1, what="refused")
    finally:
        stop(production)
    [dead] = api.dead_letters(topic, "hooks")["messages"]
    assert dead["error"].startswith(f"refused: {host} resolves to "), dead["error"]
    assert "loopback" in dead["error"] or "private" in dead["error"]
    assert receiver.at(path) == []
