"""Lua hooks: onEnqueue assigns scheduling keys, onFailure decides retry or dead letter; broken
hooks are refused when saved, and a hook that fails at run time never fails a publish."""

from __future__ import annotations

from collections.abc import Callable

from litestar.testing import TestClient

from tenants.models import NewOrganisation
from tests.fairness.conftest import FairTopic

ASSIGN = """
function on_enqueue(msg)
  local tenant = msg.headers["tenant"] or msg.data.customer
  return {fairness_key = tenant, weight = 2, throttle_keys = {"api", tenant}}
end
"""


def test_on_enqueue_assigns_what_the_message_did_not_set(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    fair = FairTopic(client, org, unique, topic_config={"onEnqueue": ASSIGN})
    fair.publish(
        [
            {"data": {"customer": "acme"}},
            {"data": {"customer": "acme"}, "headers": {"tenant": "globex"}},
            {"data": {"customer": "acme"}, "fairnessKey": "own", "throttleKeys": ["mine"]},
        ]
    )
    pulled = fair.pull(fair.join(), 10)
    assert [(m["fairnessKey"], m["throttleKeys"]) for m in pulled] == [
        ("acme", ["api", "acme"]),
        ("globex", ["api", "globex"]),
        ("own", ["mine"]),
    ]
    described = client.get(f"/v1/topics/{fair.topic}", headers=fair.headers).json()
    assert described["onEnqueue"] == ASSIGN


def test_hooks_that_do_not_compile_are_refused_when_saved(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    fair = FairTopic(client, org, unique)
    for source in ("function on_enqueue(msg) return (", "x = 1", "while true do end"):
        response = client.patch(
            f"/v1/topics/{fair.topic}", json={"onEnqueue": source}, headers=fair.headers
        )
        assert response.status_code == 422, source
        assert response.json()["error"]["code"] == "INVALID_HOOK"
    created = client.post(
        "/v1/topics",
        json={"name": f"hooked.{unique('t')}", "onEnqueue": "function on_enqueue(m) end end"},
        headers=fair.headers,
    )
    assert created.status_code == 422 and created.json()["error"]["code"] == "INVALID_HOOK"
    refused = client.put(fair.base, json={"onFailure": "function x("}, headers=fair.headers)
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "INVALID_HOOK"
    assert (
        client.get(f"/v1/topics/{fair.topic}", headers=fair.headers).json().get("onEnqueue") is None
    )


def test_a_hook_that_loops_or_escapes_never_fails_a_publish_and_is_counted(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    for source in (
        "function on_enqueue(msg) while true do end end",
        'function on_enqueue(msg) return os.execute("touch /tmp/fila-escaped") end',
        'function on_enqueue(msg) return io.open("/etc/passwd"):read("a") end',
        "function on_enqueue(msg) local t = {} for i = 1, 1e9 do t[i] = ('x'):rep(1000) end end",
        'function on_enqueue(msg) return {weight = "heavy"} end',
    ):
        fair = FairTopic(client, org, unique, topic_config={"onEnqueue": source})
        fair.publish([{"data": i, "fairnessKey": "mine"} for i in range(5)])  # 201, not 500
        pulled = fair.pull(fair.join(), 10)
        assert [(m["data"], m["fairnessKey"]) for m in pulled] == [(i, "mine") for i in range(5)]
        assert fair.stats()["hookErrors"] >= 3, source  # then suspended, still counted
    import os

    assert not os.path.exists("/tmp/fila-escaped")


RETRY_TWICE = """
function on_failure(msg)
  if msg.error == "poison" then return {action = "dlq"} end
  if msg.attempt < 3 then return {action = "retry", delay_ms = 0} end
  return {action = "dlq"}
end
"""


def test_on_failure_decides_between_retry_and_the_dead_letter_queue(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    fair = FairTopic(
        client, org, unique, onFailure=RETRY_TWICE, deadLetter={"maxRetries": 0, "retryDelay": "1h"}
    )
    assert fair.view["config"]["onFailure"] == RETRY_TWICE
    fair.publish([{"data": "flaky", "fairnessKey": "f"}, {"data": "bad", "fairnessKey": "p"}])
    member = fair.join()
    attempts = []
    for _ in range(5):
        for message in fair.pull(member, 10, wait_ms=500):
            attempts.append((message["data"], message["attempt"]))
            error = "poison" if message["data"] == "bad" else "try again"
            nacked = client.post(
                f"{fair.base}/nack",
                json={"ackId": message["ackId"], "error": error},
                headers=fair.headers,
            )
            assert nacked.status_code == 200, nacked.text
    assert attempts.count(("flaky", 1)) == 1 and ("flaky", 3) in attempts, attempts
    assert ("bad", 2) not in attempts, "dead-lettered at once although maxRetries allowed none"
    queue = client.get(f"{fair.base}/dlq", headers=fair.headers).json()
    assert sorted((m["data"], m["fairnessKey"], m["attempts"]) for m in queue["messages"]) == [
        ("bad", "p", 1),
        ("flaky", "f", 3),
    ]


def test_a_failing_on_failure_hook_leaves_the_decision_to_the_dead_letter_policy(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    fair = FairTopic(
        client,
        org,
        unique,
        onFailure="function on_failure(msg) while true do end end",
        deadLetter={"maxRetries": 0},
    )
    fair.publish([{"data": "x"}])
    [message] = fair.pull(fair.join(), 1)
    nacked = client.post(
        f"{fair.base}/nack", json={"ackId": message["ackId"]}, headers=fair.headers
    )
    assert nacked.json()["deadLettered"] is True
    assert fair.stats()["hookErrors"] == 1
