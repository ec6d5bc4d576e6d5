"""The SDK's client against a real API process: topics, errors, rate limits, lost answers."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from queuecore import (
    APIConnectionError,
    AuthenticationError,
    Conflict,
    NotFound,
    OutgoingMessage,
    PayloadTooLarge,
    QueueCore,
    RateLimited,
    Unavailable,
    ValidationError,
)

from tenants.models import NewOrganisation
from tests.sdk.conftest import eventually
from tests.support.http_faults import faulty_proxy
from tests.support.services import Services
from tests.support.tenancy import new_organisation

pytestmark = pytest.mark.e2e


def is_publish(method: str, path: str) -> bool:
    """The single-message publish route."""
    return method == "POST" and path.endswith("/messages")


def test_topics_are_created_listed_described_updated_and_deleted(pq: QueueCore) -> None:
    created = pq.topics.create("order.events", partitions=2, retention="1d")
    assert (created.name, created.partitions, created.retention) == ("order.events", 2, "1d")
    assert created.id.startswith("top_") and created.delivery == "exactly-once"
    assert [t.name for t in pq.topics.list()] == ["order.events"]
    pq.publish("order.events", {"type": "order.created"}, key="ord_1")
    described = pq.topics.describe("order.events")
    assert described.stats is not None and described.stats.depth == 1
    assert pq.topics.update("order.events", partitions=4).partitions == 4
    with pytest.raises(Conflict) as taken:
        pq.topics.create("order.events")
    assert taken.value.code == "TOPIC_EXISTS" and taken.value.status == 409
    assert pq.topics.delete("order.events").status == "deleting"
    with pytest.raises(NotFound) as missing:
        pq.topics.describe("order.events")
    assert missing.value.code == "TOPIC_NOT_FOUND"
    assert missing.value.request_id.startswith("req_")


def test_publish_results_and_batch_shapes(pq: QueueCore, org: NewOrganisation) -> None:
    pq.topics.create("shapes", partitions=3)
    one = pq.publish("shapes", {"a": 1}, key="same", headers={"trace": "t1"})
    assert one.message_id.startswith("msg_") and one.latency_ms >= 0
    assert one.idempotency_key is not None and one.timestamp.tzinfo is not None
    items = [{"data": "a dict is data"}, OutgoingMessage("x", key="same"), 42]
    batch = pq.publish_batch("shapes", items)
    assert batch.count == 3 and len({r.message_id for r in batch.results}) == 3
    assert batch.results[1].partition == one.partition  # the same key, the same partition
    stored = [_stored(pq.base_url, org, "shapes", r.partition, r.offset) for r in batch.results]
    assert stored == [{"data": "a dict is data"}, "x", 42]
    with pytest.raises(ValueError):
        pq.publish_batch("shapes", [])
    with pytest.raises(ValueError):
        pq.publish_batch("shapes", range(1001))


def _stored(base: str, org: NewOrganisation, topic: str, partition: int, offset: int) -> object:
    """The data stored at (partition, offset), read back through the browse API."""
    response = httpx.get(
        f"{base}/v1/topics/{topic}/partitions/{partition}/messages",
        params={"offset": offset, "limit": 1},
        headers={"Authorization": f"Bearer {org.keys['production'].secret}"},
    )
    return response.json()["messages"][0]["data"]


def test_errors_carry_code_status_and_request_id(pq: QueueCore) -> None:
    pq.topics.create("errs", partitions=1)
    with pytest.raises(PayloadTooLarge) as too_large:
        pq.publish("errs", "x" * (1024 * 1024 + 1))
    assert (too_large.value.code, too_large.value.status) == ("PAYLOAD_TOO_LARGE", 413)
    with pytest.raises(ValidationError) as invalid:
        pq.topics.create("bad", partitions=0)
    assert invalid.value.status in (400, 422) and invalid.value.request_id.startswith("req_")
    with pytest.raises(NotFound) as no_group:
        pq.consumer_groups.describe("errs", "nobody")
    assert no_group.value.code == "GROUP_NOT_FOUND"


def test_an_unknown_or_revoked_key_raises_authentication_error(
    api: str, org: NewOrganisation
) -> None:
    stranger = QueueCore("pq_live_sk_" + "x" * 32, api)
    with stranger, pytest.raises(AuthenticationError) as refused:
        stranger.topics.list()
    assert (refused.value.code, refused.value.status) == ("INVALID_API_KEY", 401)
    assert refused.value.request_id.startswith("req_")
    admin = {"Authorization": f"Bearer {org.keys['production'].secret}"}
    created = httpx.post(f"{api}/v1/keys", json={"name": "temp"}, headers=admin).json()
    with QueueCore(created["key"], api) as doomed:
        assert doomed.topics.list() == []
        revoked = httpx.delete(f"{api}/v1/keys/{created['id']}", headers=admin)
        assert revoked.json()["status"] == "revoked"
        errors: list[AuthenticationError] = []

        def refused_now() -> bool:
            try:
                doomed.topics.list()
            except AuthenticationError as exc:
                errors.append(exc)
                return True
            return False

        eventually(refused_now, 15, "the revoked key is refused")
    assert errors[0].request_id.startswith("req_") and errors[0].code == "INVALID_API_KEY"


def test_rate_limited_calls_are_retried_until_they_succeed(
    api: str, services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    org = new_organisation(services.database_url, tier="developer")  # 10 admin requests/s
    key = org.keys["production"].secret
    with QueueCore(key, api, max_retries=0) as impatient, ThreadPoolExecutor(20) as pool:
        outcomes = list(pool.map(lambda _: _outcome(impatient), range(20)))
    limited = [o for o in outcomes if isinstance(o, RateLimited)]
    assert limited, "a burst of 20 admin calls was not rate limited: the test proves nothing"
    assert all(e.retry_after and e.retry_after >= 1 and e.request_id for e in limited)
    caplog.set_level(logging.INFO, logger="queuecore")
    with QueueCore(key, api, max_retries=6) as patient, ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda _: patient.topics.list(), range(20)))
    assert answers == [[]] * 20
    retries = [r for r in caplog.records if getattr(r, "queuecore_retry", None)]
    assert {getattr(r, "queuecore_code", None) for r in retries} == {"RATE_LIMIT_EXCEEDED"}
    assert all(key not in r.getMessage() for r in caplog.records)


def _outcome(pq: QueueCore) -> object:
    try:
        return pq.topics.list()
    except RateLimited as exc:
        return exc


def test_a_publish_whose_answer_was_lost_is_retried_and_stored_once(
    api: str, org: NewOrganisation, caplog: pytest.LogCaptureFixture
) -> None:
    key = org.keys["production"].secret
    caplog.set_level(logging.DEBUG)  # every logger, httpx's included: the key must not appear
    with faulty_proxy(api, is_publish) as proxy, QueueCore(key, proxy.url) as pq:
        pq.topics.create("once", partitions=1)
        result = pq.publish("once", {"charge": 100})
        assert proxy.spoiled == [("POST", "/v1/topics/once/messages")]
        assert proxy.received.count(("POST", "/v1/topics/once/messages")) == 2
    assert result.offset == 0
    with QueueCore(key, api) as direct:
        stats = direct.topics.describe("once").stats
    assert stats is not None and stats.depth == 1, "the retried publish stored a second copy"
    assert caplog.records and all(key not in r.getMessage() for r in caplog.records)


def test_a_publish_without_idempotency_is_not_retried_after_a_lost_answer(
    api: str, org: NewOrganisation
) -> None:
    key = org.keys["production"].secret
    with (
        faulty_proxy(api, is_publish) as proxy,
        QueueCore(key, proxy.url, idempotent_publish=False) as pq,
    ):
        pq.topics.create("twice", partitions=1)
        with pytest.raises(APIConnectionError) as lost:
            pq.publish("twice", {"charge": 100})
        assert lost.value.status is None and lost.value.request_id.startswith("req_")
        assert proxy.received.count(("POST", "/v1/topics/twice/messages")) == 1
        pq.publish("twice", {"charge": 100})  # what a caller does next: it is stored twice
        stats = pq.topics.describe("twice").stats
    assert stats is not None and stats.depth == 2


def test_a_503_is_retried_for_safe_calls_only(api: str, org: NewOrganisation) -> None:
    key = org.keys["production"].secret
    gets = faulty_proxy(api, lambda method, _: method == "GET", fail_with=503)
    with gets as proxy, QueueCore(key, proxy.url) as pq:
        assert pq.topics.list() == []  # the 503 was answered, then the retry succeeded
        assert proxy.received == [("GET", "/v1/topics")] * 2
    posts = faulty_proxy(api, lambda method, _: method == "POST", fail_with=503)
    with posts as proxy, QueueCore(key, proxy.url) as pq:
        with pytest.raises(Unavailable) as refused:
            pq.topics.create("not-retried")  # a create is not repeated: it may have happened
        assert refused.value.request_id == refused.value.body["error"]["requestId"]
        assert proxy.received == [("POST", "/v1/topics")]
        assert pq.topics.create("retried-by-the-caller").name == "retried-by-the-caller"


def test_the_client_reads_its_key_and_url_from_the_environment(
    api: str, org: NewOrganisation, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = org.keys["production"].secret
    monkeypatch.setenv("QUEUECORE_API_KEY", key)
    monkeypatch.setenv("QUEUECORE_URL", api)
    with QueueCore() as pq:
        assert pq.health() == {"status": "ok"}
        assert pq.ready()["status"] == "ready"
        assert pq.topics.list() == []
        assert key not in repr(pq)
    monkeypatch.delenv("QUEUECORE_API_KEY")
    with pytest.raises(ValueError):
        QueueCore()
