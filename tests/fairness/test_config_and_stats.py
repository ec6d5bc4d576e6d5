"""Runtime configuration (``/v1/config``), a group's stats per key, counted redrive."""

from __future__ import annotations

import time
from collections.abc import Callable

from litestar.testing import TestClient

from tenants import service as tenants
from tenants.models import NewOrganisation
from tests.fairness.conftest import FairTopic, keyed
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation, run_in_tx


def test_config_keys_are_set_read_listed_and_deleted_per_environment(
    client: TestClient, org: NewOrganisation, services: Services
) -> None:
    headers = bearer(org.keys["production"].secret)
    for key, value in (("throttle.api.rate", "10"), ("throttle.api.burst", "20"), ("team", "x")):
        response = client.put(f"/v1/config/{key}", json={"value": value}, headers=headers)
        assert response.status_code == 200 and response.json() == {"key": key, "value": value}
    assert client.get("/v1/config/team", headers=headers).json() == {"key": "team", "value": "x"}
    listed = client.get("/v1/config", params={"prefix": "throttle."}, headers=headers).json()
    assert listed == {
        "entries": [
            {"key": "throttle.api.burst", "value": "20"},
            {"key": "throttle.api.rate", "value": "10"},
        ],
        "totalCount": 2,
    }
    assert (
        client.get("/v1/config", params={"prefix": "throttle%"}, headers=headers).json()[
            "totalCount"
        ]
        == 0
    ), "a prefix is literal: % and _ are no wildcards"
    assert client.delete("/v1/config/team", headers=headers).status_code == 204
    missing = client.get("/v1/config/team", headers=headers)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "CONFIG_KEY_NOT_FOUND"
    assert client.delete("/v1/config/team", headers=headers).status_code == 404
    other = bearer(org.keys["development"].secret)
    assert client.get("/v1/config/throttle.api.rate", headers=other).status_code == 404
    stranger = bearer(new_organisation(services.database_url).keys["production"].secret)
    assert client.get("/v1/config", headers=stranger).json()["totalCount"] == 0


def test_config_writes_need_the_admin_scope_and_throttle_values_must_be_numbers(
    client: TestClient, org: NewOrganisation, services: Services
) -> None:
    headers = bearer(org.keys["production"].secret)
    for key, value in (("throttle.api.rate", "fast"), ("throttle.api.burst", "-1")):
        refused = client.put(f"/v1/config/{key}", json={"value": value}, headers=headers)
        assert refused.status_code == 422 and refused.json()["error"]["code"] == "VALIDATION_ERROR"
    bad_key = client.put("/v1/config/has%20space", json={"value": "1"}, headers=headers)
    assert bad_key.status_code == 422
    assert client.put("/v1/config/k", json={"value": "x" * 5000}, headers=headers).status_code in (
        400,
        422,
    )
    environment_id = org.keys["production"].key.environment_id
    consume_only = run_in_tx(
        services.database_url,
        lambda conn: tenants.create_key(conn, environment_id, scopes=["consume"]),
    )
    reader = bearer(consume_only.secret)
    denied = client.put("/v1/config/k", json={"value": "1"}, headers=reader)
    assert denied.status_code == 403
    assert client.get("/v1/config", headers=reader).status_code == 200


def test_stats_break_a_fair_group_down_per_key(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    fair = FairTopic(client, org, unique, fairness={"weights": {"gold": 3}, "quantum": 2})
    client.put("/v1/config/throttle.gold-api.rate", json={"value": "1"}, headers=fair.headers)
    fair.publish(keyed("gold", 10) + keyed("basic", 4) + [{"data": "none"}])
    member = fair.join()
    pulled = fair.pull(member, 7)  # gold: 6 (quantum 2 * weight 3), basic: 1 (deficit 2 - 1)
    assert [m["fairnessKey"] for m in pulled] == ["gold"] * 6 + ["basic"]
    stats = fair.stats()
    assert (stats["depth"], stats["inFlight"], stats["activeConsumers"]) == (8, 7, 1)
    assert stats["quantum"] == 2 and stats["activeFairnessKeys"] == 3
    assert stats["perKey"] == [
        {"key": "", "pending": 1, "deficit": 0, "weight": 1},
        {"key": "basic", "pending": 3, "deficit": 1, "weight": 1},
        {"key": "gold", "pending": 4, "deficit": 0, "weight": 3},
    ]
    throttle = [t for t in stats["perThrottle"] if t["key"] == "gold-api"]
    assert throttle == [{"key": "gold-api", "tokens": 1.0, "ratePerSecond": 1.0, "burst": 1.0}]
    assert stats["hookErrors"] == 0
    ordinary = client.get(f"/v1/topics/{fair.topic}/groups/other/stats", headers=fair.headers)
    assert ordinary.status_code == 404


def test_counted_redrive_replays_the_oldest_dead_letters_first(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    fair = FairTopic(client, org, unique, deadLetter={"maxRetries": 0})
    fair.publish([{"data": i, "fairnessKey": "k", "throttleKeys": ["t"]} for i in range(5)])
    member = fair.join()
    for message in fair.pull(member, 5):
        client.post(f"{fair.base}/nack", json={"ackId": message["ackId"]}, headers=fair.headers)
        time.sleep(0.01)  # dead_at orders them
    queue = client.get(f"{fair.base}/dlq", headers=fair.headers).json()
    assert queue["depth"] == 5
    assert [(m["fairnessKey"], m["throttleKeys"]) for m in queue["messages"]] == [("k", ["t"])] * 5
    replayed = client.post(f"{fair.base}/dlq/replay", json={"count": 2}, headers=fair.headers)
    assert replayed.status_code == 200 and replayed.json() == {"replayed": 2}
    again = fair.pull(member, 10, wait_ms=1000)
    assert [(m["data"], m["attempt"], m["fairnessKey"]) for m in again] == [
        (0, 1, "k"),
        (1, 1, "k"),
    ]
    assert client.get(f"{fair.base}/dlq", headers=fair.headers).json()["depth"] == 3
    for bad in ({"count": 0}, {"count": -1}, {"limit": 2}):
        refused = client.post(f"{fair.base}/dlq/replay", json=bad, headers=fair.headers)
        assert refused.status_code in (400, 422), bad
    rest = client.post(f"{fair.base}/dlq/replay", headers=fair.headers)
    assert rest.json() == {"replayed": 3}
