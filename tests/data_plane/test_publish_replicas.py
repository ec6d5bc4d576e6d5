"""Two ``queuecore serve`` replicas publishing to ONE partition at once: PostgreSQL is the one
sequencer, so every answered offset is distinct, the offsets are gap-free, each client sees them
increase, and a batch's offsets are consecutive.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.db import connect
from tests.support.processes import replicas
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation

pytestmark = pytest.mark.e2e

CLIENTS_PER_REPLICA = 3
REQUESTS_PER_CLIENT = 12
BATCH_SIZE = 5


@pytest.fixture
def two_replicas(services: Services, tmp_path: Path) -> Iterator[list[str]]:
    """Two single-worker API processes on their own ports; yields their base URLs."""
    with replicas(services.env(), tmp_path) as started:
        yield [r.url for r in started]


def publish_many(url: str, path: str, headers: dict[str, str], client_no: int) -> list[list[int]]:
    """Alternate single and batch publishes; the offsets of each answer, in order."""
    answers = []
    with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
        for n in range(REQUESTS_PER_CLIENT):
            if n % 2:
                batch = [{"data": {"c": client_no, "n": n, "i": i}} for i in range(BATCH_SIZE)]
                response = http.post(f"{path}/batch", json={"messages": batch})
                assert response.status_code == 201, response.text
                answers.append([r["offset"] for r in response.json()["results"]])
            else:
                response = http.post(path, json={"data": {"c": client_no, "n": n}})
                assert response.status_code == 201, response.text
                answers.append([response.json()["offset"]])
    return answers


def test_two_replicas_publishing_to_one_partition_get_gap_free_offsets(
    two_replicas: list[str], services: Services
) -> None:
    org = new_organisation(services.database_url, tier="pro")
    headers = bearer(org.keys["production"].secret)
    created = httpx.post(
        f"{two_replicas[0]}/v1/topics", json={"name": "seq.one", "partitions": 1}, headers=headers
    )
    assert created.status_code == 201, created.text
    topic_id = created.json()["id"]
    results: dict[int, list[list[int]]] = {}
    errors: list[BaseException] = []

    def client(number: int) -> None:
        try:
            url = two_replicas[number % 2]
            results[number] = publish_many(url, "/v1/topics/seq.one/messages", headers, number)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(2 * CLIENTS_PER_REPLICA)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    per_client = REQUESTS_PER_CLIENT // 2 * (1 + BATCH_SIZE)
    total = 2 * CLIENTS_PER_REPLICA * per_client
    offsets = [o for answers in results.values() for answer in answers for o in answer]
    assert len(offsets) == total
    assert set(offsets) == set(range(total))
    for answers in results.values():
        flat = [o for answer in answers for o in answer]
        assert flat == sorted(flat)  # one client's sequential publishes keep their order
        for answer in answers:
            assert answer == list(range(answer[0], answer[0] + len(answer)))
    assert_index_is_contiguous(services.database_url, topic_id, total)


def assert_index_is_contiguous(database_url: str, topic_id: str, total: int) -> None:
    with connect(database_url) as conn:
        blocks: list[dict[str, Any]] = conn.execute(
            "SELECT base_offset, count FROM segment_blocks WHERE topic_id = %s ORDER BY base_offset",
            (topic_id,),
        ).fetchall()
        partition = conn.execute(
            "SELECT next_offset FROM partitions WHERE topic_id = %s", (topic_id,)
        ).fetchone()
    expected = 0
    for block in blocks:
        assert block["base_offset"] == expected
        expected += block["count"]
    assert expected == total
    assert partition == {"next_offset": total}
