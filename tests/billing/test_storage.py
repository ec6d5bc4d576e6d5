"""The storage sampler: an environment's stored bytes, one sample per slot, averaged per hour."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from litestar.testing import TestClient

from billing import usage
from core.db import connect
from infra.celery_app import celery_app
from tenants.models import NewOrganisation
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation, run_in_tx
from tests.support.usage import hourly_row


def stored_bytes(url: str, environment_id: str) -> int:
    """What the index says the environment's active topics hold."""
    with connect(url) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(b.byte_length), 0)::bigint AS bytes FROM segment_blocks b"
            " JOIN topics t ON t.id = b.topic_id AND t.status = 'active'"
            " WHERE t.environment_id = %s",
            (environment_id,),
        ).fetchone()
    assert row is not None
    return int(row["bytes"])


def topic_with_data(
    client: TestClient, org: NewOrganisation, env: str, name: str, count: int
) -> dict[str, str]:
    headers = bearer(org.keys[env].secret)
    assert client.post("/v1/topics", json={"name": name}, headers=headers).status_code == 201
    batch = {"messages": [{"data": "s" * 500} for _ in range(count)]}
    sent = client.post(f"/v1/topics/{name}/messages/batch", json=batch, headers=headers)
    assert sent.status_code == 201, sent.text
    return headers


def sample(url: str, at: datetime, environment_id: str | None) -> int:
    return run_in_tx(url, lambda conn: usage.sample_storage(conn, at, environment_id))


def storage(url: str, env: str, hour: datetime) -> tuple[int, int, int] | None:
    row = hourly_row(url, env, hour)
    if row is None:
        return None
    return row["storage_samples"], row["storage_bytes_sum"], row["storage_bytes_max"]


def test_one_sample_per_slot_averaged_in_the_hour_and_zero_once_the_topics_are_gone(
    client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    url, org = services.database_url, new_organisation(services.database_url, tier="pro")
    env, topic = org.project.environment("production").id, unique("stored")
    headers = topic_with_data(client, org, "production", topic, 40)
    stored = stored_bytes(url, env)
    hour = datetime(2005, 5, 5, 5, tzinfo=UTC)

    def minute(m: int) -> datetime:
        return hour + timedelta(minutes=m)

    assert stored > 0
    assert sample(url, minute(1), env) == 1
    assert sample(url, minute(4), env) == 0  # the same 5-minute slot: no second sample
    assert storage(url, env, hour) == (1, stored, stored)
    assert sample(url, minute(5), env) == 1
    assert client.delete(f"/v1/topics/{topic}", headers=headers).status_code == 202
    assert sample(url, minute(10), env) == 1  # nothing stored now: a 0 sample
    assert storage(url, env, hour) == (3, 2 * stored, stored)
    assert sample(url, minute(65), env) == 0  # a new hour, nothing stored: no row at all
    assert storage(url, env, hour + timedelta(hours=1)) is None

    body = client.get(
        "/v1/usage",
        params={"from": "2005-05-05T05:00", "to": "2005-05-05T06:00", "granularity": "hour"},
        headers=headers,
    ).json()
    assert body["totals"]["storageByteHours"] == 2 * stored / 3
    assert body["totals"]["storageBytesMax"] == stored


def test_each_environment_is_sampled_with_its_own_topics_only(
    client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    url, org = services.database_url, new_organisation(services.database_url, tier="pro")
    production, staging = (org.project.environment(n).id for n in ("production", "staging"))
    topic_with_data(client, org, "production", unique("p"), 30)
    topic_with_data(client, org, "staging", unique("s"), 5)
    hour = datetime(2006, 6, 6, 6, tzinfo=UTC)

    assert sample(url, hour, None) >= 2  # every environment that stores something

    expected = {env: stored_bytes(url, env) for env in (production, staging)}
    assert expected[production] > expected[staging] > 0
    for env, stored in expected.items():
        assert storage(url, env, hour) == (1, stored, stored)
    developer = new_organisation(services.database_url).project.environment("production").id
    assert storage(url, developer, hour) is None  # nothing stored, no row


def test_the_beat_task_samples_on_a_worker(
    celery_worker: Path, client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    url, org = services.database_url, new_organisation(services.database_url, tier="pro")
    env = org.project.environment("production").id
    topic_with_data(client, org, "production", unique("w"), 10)

    sent = celery_app().send_task("billing.sample_storage", kwargs={"environment_id": env})

    assert sent.get(timeout=60) == {"environmentsSampled": 1}
    with connect(url) as conn:
        row = conn.execute(
            "SELECT storage_samples, storage_bytes_sum FROM usage_hourly"
            " WHERE environment_id = %s ORDER BY hour DESC LIMIT 1",
            (env,),
        ).fetchone()
    assert row is not None
    assert (row["storage_samples"], row["storage_bytes_sum"]) == (1, stored_bytes(url, env))
