"""A fair group on a topic, driven over HTTP as a client library would."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from litestar.testing import TestClient

from tenants.models import NewOrganisation
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation


class FairTopic:
    """A topic with a group configured by ``group_config`` (fair unless it says otherwise)."""

    def __init__(
        self,
        client: TestClient,
        org: NewOrganisation,
        unique: Callable[[str], str],
        *,
        partitions: int = 1,
        delivery: str = "exactly-once",
        topic_config: dict[str, Any] | None = None,
        **group_config: Any,
    ) -> None:
        self.client, self.headers = client, bearer(org.keys["production"].secret)
        self.topic = f"fair.{unique('t')}"
        body = {"name": self.topic, "partitions": partitions, "delivery": delivery}
        created = client.post(
            "/v1/topics", json={**body, **(topic_config or {})}, headers=self.headers
        )
        assert created.status_code == 201, created.text
        self.base = f"/v1/topics/{self.topic}/groups/workers"
        config = {"startFrom": "earliest", "fairness": {}, **group_config}
        response = client.put(self.base, json=config, headers=self.headers)
        assert response.status_code == 200, response.text
        self.view = response.json()

    def publish(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A batch (up to 1,000) of ``{data, fairnessKey?, throttleKeys?, …}``."""
        results = []
        for start in range(0, len(messages), 1000):
            response = self.client.post(
                f"/v1/topics/{self.topic}/messages/batch",
                json={"messages": messages[start : start + 1000]},
                headers=self.headers,
            )
            assert response.status_code == 201, response.text
            results += response.json()["results"]
        return results

    def join(self, **body: Any) -> str:
        response = self.client.post(f"{self.base}/members", json=body, headers=self.headers)
        assert response.status_code == 201, response.text
        return str(response.json()["memberId"])

    def pull(self, member: str, max_messages: int = 100, wait_ms: int = 0) -> list[dict[str, Any]]:
        response = self.client.post(
            f"{self.base}/members/{member}/pull",
            json={"maxMessages": max_messages, "waitMs": wait_ms},
            headers=self.headers,
        )
        assert response.status_code == 200, response.text
        return list(response.json()["messages"])

    def ack(self, *ack_ids: str) -> dict[str, Any]:
        response = self.client.post(
            f"{self.base}/ack", json={"ackIds": list(ack_ids)}, headers=self.headers
        )
        assert response.status_code == 200, response.text
        return dict(response.json())

    def stats(self) -> dict[str, Any]:
        response = self.client.get(f"{self.base}/stats", headers=self.headers)
        assert response.status_code == 200, response.text
        return dict(response.json())

    def offsets(self) -> list[dict[str, Any]]:
        response = self.client.get(f"{self.base}/offsets", headers=self.headers)
        assert response.status_code == 200, response.text
        return list(response.json()["partitions"])


@pytest.fixture
def org(services: Services) -> NewOrganisation:
    """A Pro organisation: limits generous enough for floods."""
    return new_organisation(services.database_url, tier="pro")


def keyed(key: str, count: int, start: int = 0, **extra: Any) -> list[dict[str, Any]]:
    """``count`` messages of fairness key ``key``, their data ``"key-i"``."""
    return [
        {"data": f"{key}-{i}", "fairnessKey": key, **extra} for i in range(start, start + count)
    ]
