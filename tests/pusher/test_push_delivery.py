"""Push groups delivered by a real ``queuecore pusher`` to a real local HTTP receiver: signed
bodies, acks by 2xx, retries with the group's backoff or an endpoint's ``Retry-After``, dead
letters with the reason kept, timeouts, per-key order, and an endpoint that is down for a while."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tenants.models import NewOrganisation
from tests.pusher.conftest import Api, eventually
from tests.support.push_receiver import Pushed, Receiver, Reply
from tests.support.services import Services
from tests.support.usage import hourly_totals

pytestmark = pytest.mark.e2e


def test_each_message_is_posted_signed_once_and_acked_by_a_2xx(
    api: Api, receiver: Receiver, pusher: Path, unique: Callable[[str], str]
) -> None:
    topic = api.topic(unique("push-ok"), partitions=2)
    secret = api.push_group(topic, "hooks", {"endpoint": receiver.url(f"/{topic}")})
    sent = [api.publish(topic, {"n": n}, key=f"k{n}", headers={"source": "test"}) for n in range(6)]
    got = receiver.wait_for(f"/{topic}", 6)
    eventually(lambda: api.lag(topic, "hooks") == 0, what="every push acked")
    by_id = {pushed.json()["messageId"]: pushed for pushed in got}
    assert set(by_id) == {s["messageId"] for s in sent}  # each once: acked, never pushed again
    for message in sent:
        pushed = by_id[message["messageId"]]
        assert pushed.signed_by(secret)
        assert not pushed.signed_by("whsec_" + "x" * 32)
        assert pushed.headers["queuecore-event"] == "message"
        assert pushed.headers["content-type"] == "application/json"
        assert abs(int(pushed.headers["queuecore-timestamp"]) - time.time()) < 60
        body = pushed.json()
        assert body["topic"] == topic and body["group"] == "hooks"
        assert (body["partition"], body["offset"]) == (message["partition"], message["offset"])
        assert body["attempt"] == 1
        assert body["headers"] == {"source": "test"}
        assert body["key"] == f"k{body['data']['n']}"
        assert body["timestamp"].endswith("Z")
    assert len({p.headers["queuecore-delivery"] for p in got}) == 6
    time.sleep(1.0)
    assert len(receiver.at(f"/{topic}")) == 6
    # The group shows its pusher as its member, and no member of the caller's can join it.
    assert [m["clientId"].split()[0] for m in api.group(topic, "hooks")["members"]] == [
        "queuecore-pusher"
    ]


def test_a_500_is_retried_after_the_groups_backoff_as_attempt_2(
    api: Api, receiver: Receiver, pusher: Path, unique: Callable[[str], str]
) -> None:
    topic = api.topic(unique("push-once"))
    path = f"/{topic}"
    receiver.scripts[path] = lambda _, before: Reply(500 if before == 0 else 200)
    dead_letter = {"maxRetries": 3, "retryDelay": "1s"}
    api.push_group(topic, "hooks", {"endpoint": receiver.url(path)}, deadLetter=dead_letter)
    message = api.publish(topic, {"n": 1})
    first, second = receiver.wait_for(path, 2)
    assert [first.json()["attempt"], second.json()["attempt"]] == [1, 2]
    assert first.json()["messageId"] == second.json()["messageId"] == message["messageId"]
    assert first.headers["queuecore-delivery"] != second.headers["queuecore-delivery"]
    assert second.arrived - first.answered >= 0.9  # retryDelay · 2^0
    eventually(lambda: api.lag(topic, "hooks") == 0, what="the retry acked")
    assert api.dead_letters(topic, "hooks")["depth"] == 0


def test_an_endpoint_that_always_fails_dead_letters_after_max_retries_with_its_reason(
    api: Api, receiver: Receiver, pusher: Path, unique: Callable[[str], str]
) -> None:
    topic = api.topic(unique("push-dead"))
    path = f"/{topic}"
    receiver.scripts[path] = lambda *_: Reply(500)
    dead_letter = {"maxRetries": 2, "retryDelay": "100ms"}
    api.push_group(topic, "hooks", {"endpoint": receiver.url(path)}, deadLetter=dead_letter)
    message = api.publish(topic, {"n": 1})
    eventually(lambda: api.dead_letters(topic, "hooks")["depth"] == 1, what="a dead letter")
    attempts = [pushed.json()["attempt"] for pushed in receiver.at(path)]
    assert attempts == [1, 2, 3]
    [dead] = api.dead_letters(topic, "hooks")["messages"]
    assert dead["messageId"] == message["messageId"]
    assert dead["error"] == "HTTP 500"
    assert dead["attempts"] == 3
    assert api.lag(topic, "hooks") == 0  # dead-lettered counts as done
    # Replayed, it is pushed again, as attempt 1.
    replay = api.client.post(f"/v1/topics/{topic}/groups/hooks/dlq/replay", headers=api.headers)
    assert replay.status_code == 200, replay.text
    receiver.scripts[path] = lambda *_: Reply(204)
    pushed = receiver.wait_for(path, 4)[-1]
    assert pushed.json()["attempt"] == 1
    eventually(lambda: api.dead_letters(topic, "hooks")["depth"] == 0, what="replay acked")


GONE_IS_FINAL = """
function on_failure(msg)
  if msg.error == "HTTP 410" then return {action = "dlq"} end
end
"""


def test_the_groups_on_failure_hook_decides_a_failed_push(
    api: Api, receiver: Receiver, pusher: Path, unique: Callable[[str], str]
) -> None:
    topic = api.topic(unique("push-hook"))
    path = f"/{topic}"
    receiver.scripts[path] = lambda *_: Reply(410)
    dead_letter = {"maxRetries": 5, "retryDelay": "100ms"}
    push = {"endpoint": receiver.url(path)}
    api.push_group(topic, "hooks", push, deadLetter=dead_letter, onFailure=GONE_IS_FINAL)
    api.publish(topic, {"n": 1})
    eventually(lambda: api.dead_letters(topic, "hooks")["depth"] == 1, what="a dead letter")
    [dead] = api.dead_letters(topic, "hooks")["messages"]
    assert (dead["error"], dead["attempts"]) == ("HTTP 410", 1)  # the hook's call, not 5 retries
    time.sleep(0.5)
    assert [pushed.json()["attempt"] for pushed in receiver.at(path)] == [1]


def test_a_post_past_its_timeout_fails_and_is_retried(
    api: Api, receiver: Receiver, pusher: Path, unique: Callable[[str], str]
) -> None:
    topic = api.topic(unique("push-slow"))
    path = f"/{topic}"
    receiver.scripts[path] = lambda _, before: Reply(200, delay_s=2.5 if before == 0 else 0)
    dead_letter = {"maxRetries": 0, "retryDelay": "0s"}
    push = {"endpoint": receiver.url(path), "timeout": "1s"}
    api.push_group(topic, "hooks", push, deadLetter=dead_letter)
    api.publish(topic, {"n": 1})
    eventually(lambda: api.dead_letters(topic, "hooks")["depth"] == 1, what="a dead letter")
    [dead] = api.dead_letters(topic, "hooks")["messages"]
    assert dead["error"] == "timed out after 1s"
    [pushed] = receiver.at(path)
    assert pushed.answered == 0.0 or pushed.answered - pushed.arrived >= 2.4  # it kept waiting


def test_retry_after_of_a_503_sets_the_retry_delay(
    api: Api, receiver: Receiver, pusher: Path, unique: Callable[[str], str]
) -> None:
    topic = api.topic(unique("push-later"))
    path = f"/{topic}"
    receiver.scripts[path] = lambda _, before: (
        Reply(503, {"Retry-After": "2"}) if before == 0 else Reply(200)
    )
    dead_letter = {"maxRetries": 3, "retryDelay": "1m"}  # without Retry-After: a minute
    api.push_group(topic, "hooks", {"endpoint": receiver.url(path)}, deadLetter=dead_letter)
    api.publish(topic, {"n": 1})
    first, second = receiver.wait_for(path, 2, timeout_s=15)
    waited = second.arrived - first.answered
    assert 1.8 <= waited < 10, waited
    assert second.json()["attempt"] == 2


def test_an_ordered_group_pushes_one_message_per_key_at_a_time_in_order(
    api: Api, receiver: Receiver, pusher: Path, unique: Callable[[str], str]
) -> None:
    topic = api.topic(unique("push-ordered"), partitions=2)
    path = f"/{topic}"

    def slow_and_failing_once(pushed: Pushed, _: int) -> Reply:
        body = pushed.json()
        failing = body["data"]["n"] == 3 and body["attempt"] == 1  # key "a"
        return Reply(500 if failing else 200, delay_s=0.03)

    receiver.scripts[path] = slow_and_failing_once
    batch = [{"data": {"n": n}, "key": "abc"[n % 3]} for n in range(30)]
    published = api.client.post(
        f"/v1/topics/{topic}/messages/batch", json={"messages": batch}, headers=api.headers
    )
    assert published.status_code == 201, published.text
    push = {"endpoint": receiver.url(path), "ordered": True, "maxInFlight": 50}
    api.push_group(topic, "hooks", push, deadLetter={"maxRetries": 3, "retryDelay": "1s"})
    got = receiver.wait_for(path, 31)
    eventually(lambda: api.lag(topic, "hooks") == 0, what="all acked")
    for key in "abc":
        pushes = [p.json() for p in got if p.json()["key"] == key and p.status == 200]
        assert [p["data"]["n"] for p in pushes] == list(range("abc".index(key), 30, 3)), key
        assert receiver.most_in_flight[(path, key)] == 1, key
    retried = [p.json() for p in got if p.json()["data"]["n"] == 3]
    assert [p["attempt"] for p in retried] == [1, 2]
    # Keys do not wait for each other: "b" and "c" went on while "a" waited for its retry.
    a_retry = next(p for p in got if p.json()["data"]["n"] == 3 and p.json()["attempt"] == 2)
    a_failed = next(p for p in got if p.json()["data"]["n"] == 3 and p.json()["attempt"] == 1)
    others = [p for p in got if p.json()["key"] != "a" and a_failed.arrived < p.arrived]
    assert len([p for p in others if p.arrived < a_retry.arrived]) >= 4
    assert a_retry.arrived - a_failed.answered >= 0.9  # its backoff, kept by the pusher


def test_an_endpoint_down_for_a_while_gets_everything_when_it_is_back(
    api: Api, pusher: Path, unique: Callable[[str], str]
) -> None:
    down = Receiver()
    down.start()
    down.stop()  # its port refuses connections
    topic = api.topic(unique("push-down"), partitions=2)
    path = f"/{topic}"
    dead_letter = {"maxRetries": 20, "retryDelay": "100ms"}
    api.push_group(topic, "hooks", {"endpoint": down.url(path)}, deadLetter=dead_letter)
    sent = {api.publish(topic, {"n": n})["messageId"] for n in range(20)}
    time.sleep(2)
    down.start()  # back, on the same port
    try:
        eventually(lambda: api.lag(topic, "hooks") == 0, timeout_s=60, what="all delivered")
        assert {p.json()["messageId"] for p in down.at(path) if p.status == 200} == sent
        assert api.dead_letters(topic, "hooks")["depth"] == 0
    finally:
        down.stop()


def test_push_deliveries_are_metered_as_messages_out(
    api: Api,
    org: NewOrganisation,
    receiver: Receiver,
    pusher: Path,
    services: Services,
    unique: Callable[[str], str],
) -> None:
    environment_id = org.keys["production"].key.environment_id
    topic = api.topic(unique("push-meter"))
    api.push_group(topic, "hooks", {"endpoint": receiver.url(f"/{topic}")})
    before = hourly_totals(services.database_url, environment_id)["messages_out"]
    for n in range(5):
        api.publish(topic, {"n": n, "pad": "x" * 100})
    receiver.wait_for(f"/{topic}", 5)

    def metered() -> bool:
        totals = hourly_totals(services.database_url, environment_id)
        return int(totals["messages_out"]) >= before + 5

    eventually(metered, what="the pushes metered", timeout_s=15)


def test_push_off_stops_the_pushes_and_the_group_is_consumed_by_members_again(
    api: Api, receiver: Receiver, pusher: Path, unique: Callable[[str], str]
) -> None:
    topic = api.topic(unique("push-off"), delivery="at-least-once")
    path = f"/{topic}"
    api.push_group(topic, "hooks", {"endpoint": receiver.url(path)})
    api.publish(topic, {"n": 1})
    receiver.wait_for(path, 1)
    eventually(lambda: api.lag(topic, "hooks") == 0, what="the push acked")
    off = api.client.put(
        f"/v1/topics/{topic}/groups/hooks", json={"push": None}, headers=api.headers
    )
    assert off.status_code == 200 and off.json()["config"]["push"] is None
    assert off.json()["members"] == []  # the pushers were sent away
    second = api.publish(topic, {"n": 2})
    members = f"/v1/topics/{topic}/groups/hooks/members"
    joined = api.client.post(members, json={}, headers=api.headers)
    assert joined.status_code == 201, joined.text
    pulled = api.client.post(
        f"{members}/{joined.json()['memberId']}/pull", json={"waitMs": 5000}, headers=api.headers
    )
    assert [m["messageId"] for m in pulled.json()["messages"]] == [second["messageId"]]
    time.sleep(0.5)  # a pusher looks every 0.2 s: it would have pushed by now
    assert len(receiver.at(path)) == 1
