"""Tenancy over the Kafka protocol: wrong keys refused, another organisation's topics absent,
scopes, admin requests, and rate limits reported the Kafka way (throttle time)."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kafka_protocol.versions import Api
from tenants import service as tenants
from tests.kafka_protocol.conftest import KafkaApi, Tenant, create_topic, librdkafka
from tests.kafka_protocol.raw import RawClient, batch_of
from tests.support.services import Services
from tests.support.tenancy import new_organisation, run_in_tx

Names = Callable[[str], str]


def test_a_wrong_key_is_refused_and_the_connection_closed(kafka_api: KafkaApi) -> None:
    raw = RawClient(kafka_api.bootstrap)
    answer = raw.login("pq_live_sk_" + "x" * 32)
    assert answer.error_code == 58  # SASL_AUTHENTICATION_FAILED
    try:
        raw.request(
            Api.METADATA,
            9,
            topics=None,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        raise AssertionError("the connection stayed open after a failed login")
    except (ConnectionError, OSError):
        pass
    finally:
        raw.close()
    admin = AdminClient(librdkafka(kafka_api, "pq_live_sk_" + "y" * 32))
    try:
        admin.list_topics(timeout=3)
        raise AssertionError("a wrong key listed topics")
    except KafkaException as exc:
        assert exc.args[0].code() in (
            KafkaError._AUTHENTICATION,
            KafkaError._TRANSPORT,
            KafkaError._TIMED_OUT,
        )


def test_another_organisations_topics_do_not_exist(
    kafka_api: KafkaApi, tenant: Tenant, services: Services, unique: Names
) -> None:
    topic = unique("private")
    create_topic(kafka_api, tenant, topic)
    other = new_organisation(services.database_url, tier="pro").keys["production"].secret
    listed = AdminClient(librdkafka(kafka_api, other)).list_topics(timeout=10).topics
    assert topic not in listed
    raw = RawClient(kafka_api.bootstrap)
    raw.login(other)
    _, answer = raw.produce(topic, 0, batch_of([b"1"]))
    raw.close()
    assert answer.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    listed_by_owner = AdminClient(librdkafka(kafka_api, tenant.key)).list_topics(timeout=10).topics
    assert topic in listed_by_owner


def test_scopes_apply_and_admin_keys_manage_topics(
    kafka_api: KafkaApi, services: Services, unique: Names
) -> None:
    made = new_organisation(services.database_url, tier="pro")
    environment_id = made.keys["staging"].key.environment_id
    consume_only = run_in_tx(
        services.database_url,
        lambda conn: tenants.create_key(conn, environment_id, scopes=["consume"]),
    ).secret
    admin_key = made.keys["staging"].secret
    topic = unique("admin")
    admin = AdminClient(librdkafka(kafka_api, admin_key))
    admin.create_topics([NewTopic(topic, 2)])[topic].result(timeout=15)
    with httpx_client(kafka_api, admin_key) as rest:
        assert rest.get(f"/topics/{topic}").json()["partitions"] == 2

    weak = AdminClient(librdkafka(kafka_api, consume_only))
    (future,) = weak.create_topics([NewTopic(unique("no"), 1)]).values()
    try:
        future.result(timeout=15)
        raise AssertionError("a key without the admin scope created a topic")
    except KafkaException as exc:
        assert exc.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    raw = RawClient(kafka_api.bootstrap)
    raw.login(consume_only)
    _, answer = raw.produce(topic, 0, batch_of([b"1"]))
    raw.close()
    assert answer.error_code == 29  # TOPIC_AUTHORIZATION_FAILED: no publish scope

    admin.delete_topics([topic])[topic].result(timeout=15)
    with httpx_client(kafka_api, admin_key) as rest:
        assert rest.get(f"/topics/{topic}").status_code == 404


def test_a_rate_limit_is_reported_as_throttle_time(
    kafka_api: KafkaApi, services: Services, unique: Names
) -> None:
    key, topic = limited(kafka_api, services, unique("limited"))
    raw = RawClient(kafka_api.bootstrap)
    raw.login(key)
    started = time.monotonic()
    throttles = []
    for i in range(6):
        response, answer = raw.produce(topic, 0, batch_of([b"%d" % i]))
        assert answer.error_code == 0
        throttles.append(response.throttle_time / datetime.timedelta(milliseconds=1))
    elapsed = time.monotonic() - started
    raw.close()
    assert sum(1 for t in throttles if t > 0) >= 2  # held, and told so
    assert sum(throttles) >= 800  # the third request alone waited for the first to leave
    assert elapsed >= 1.5  # 6 requests at 2 per second: the limit held


def test_librdkafka_sees_the_throttle(
    kafka_api: KafkaApi, services: Services, unique: Names
) -> None:
    key, topic = limited(kafka_api, services, unique("throttled"))
    throttled: list[int] = []
    producer = Producer(
        librdkafka(
            kafka_api,
            key,
            **{"linger.ms": 0, "throttle_cb": lambda e: throttled.append(e.throttle_time)},
        )
    )
    for i in range(6):
        producer.produce(topic, b"%d" % i)
        producer.flush(10)
    producer.poll(0.5)
    assert throttled and max(throttled) > 0


def limited(api: KafkaApi, services: Services, topic: str) -> tuple[str, str]:
    """A key allowed 2 publish requests per second, and a topic of its environment."""
    made = new_organisation(services.database_url, tier="enterprise")
    run_in_tx(
        services.database_url,
        lambda conn: tenants.set_tier(
            conn, made.organisation.id, "enterprise", {"publish_per_s": 2}
        ),
    )
    key = made.keys["production"].secret
    with httpx_client(api, key) as rest:
        assert rest.post("/topics", json={"name": topic, "partitions": 1}).status_code == 201
    return key, topic


def httpx_client(api: KafkaApi, key: str):  # type: ignore[no-untyped-def]
    import httpx

    return httpx.Client(
        base_url=f"{api.base}/v1", headers={"Authorization": f"Bearer {key}"}, timeout=30
    )


def test_a_revoked_key_stops_working_on_an_open_connection(
    kafka_api: KafkaApi, services: Services, unique: Names
) -> None:
    made = new_organisation(services.database_url, tier="pro")
    issued = made.keys["production"]
    topic = unique("revoked")
    with httpx_client(kafka_api, issued.secret) as rest:
        assert rest.post("/topics", json={"name": topic, "partitions": 1}).status_code == 201
    raw = RawClient(kafka_api.bootstrap)
    raw.login(issued.secret)
    _, before = raw.produce(topic, 0, batch_of([b"1"]))
    assert before.error_code == 0
    run_in_tx(
        services.database_url,
        lambda conn: tenants.revoke_key(conn, issued.key.environment_id, issued.key.id),
    )
    time.sleep(4.5)  # the authentication cache (2 s) and the connection's recheck (2 s)
    try:
        raw.produce(topic, 0, batch_of([b"2"]))
        raise AssertionError("a revoked key still produced")
    except (ConnectionError, OSError):
        pass
    finally:
        raw.close()
