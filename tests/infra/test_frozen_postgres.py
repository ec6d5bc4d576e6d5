"""A frozen PostgreSQL is bounded from the client: a real ``queuecore serve`` whose dedicated
PostgreSQL is stopped (SIGSTOP on every process) for longer than the statement timeout answers
every request within its documented bound, with a 503 in the error envelope (never a 500 and
never the whole freeze), ``/readyz`` within its check's limit, and commits nothing a request gave
up on. After the thaw it serves again at once on fresh connections, and PostgreSQL's backends do
not pile up.

``statement_timeout`` is PostgreSQL's own clock, which does not run while it is stopped: only
the client's bounds (``core.db``) can end these waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import secrets
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from control_plane.edge.health import CHECK_TIMEOUT_S
from infra.embedded import EmbeddedPostgres, free_port_block
from kafka_protocol import wire
from kafka_protocol.session import RECHECK_KEY_S
from kafka_protocol.versions import Api
from tenants.authn import CACHE_TTL_S
from tests.faults.cluster import signal_tree
from tests.kafka_protocol.raw import RawClient, batch_of
from tests.support.processes import http_status, queuecore, stop, wait_for
from tests.support.services import Services, dedicated_postgres
from tests.support.tenancy import bearer, new_organisation

pytestmark = pytest.mark.e2e

STATEMENT_MS, REQUEST_MS, RESOLVE_MS = 1_000, 2_500, 1_000
BOUND_S = (REQUEST_MS + RESOLVE_MS) / 1000 + 1.5  # the documented bound, plus a loaded machine
FREEZE_S = BOUND_S + 3.0  # a request that waits for the thaw fails the bound
POOL_MAX = 4
KAFKA_BOUND_S = REQUEST_MS / 1000 + 1.5  # a request that publishes nothing


@dataclass
class Frozen:
    """The API in front of a PostgreSQL this module may stop."""

    postgres: EmbeddedPostgres
    url: str
    key: str
    topic: str
    bootstrap: str  # its Kafka listener

    def backends(self) -> int:
        """PostgreSQL's processes (postmaster children: backends and auxiliaries)."""
        assert self.postgres.process is not None
        return len(psutil.Process(self.postgres.process.pid).children())

    def freeze(self) -> None:
        """Stop every PostgreSQL process."""
        assert self.postgres.process is not None
        signal_tree(self.postgres.process, signal.SIGSTOP)

    def thaw(self) -> None:
        """Let every PostgreSQL process run again."""
        assert self.postgres.process is not None
        signal_tree(self.postgres.process, signal.SIGCONT)


@pytest.fixture(scope="module")
def frozen(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Frozen]:
    root = tmp_path_factory.mktemp("frozen")
    with dedicated_postgres(root) as postgres:
        yield from _serving(services, postgres, root)


def _serving(services: Services, postgres: EmbeddedPostgres, root: Path) -> Iterator[Frozen]:
    """The API on ``postgres``, with a topic; PostgreSQL let run again whatever happens."""
    org = new_organisation(postgres.url, tier="pro")
    port, kafka_port = free_port_block(), free_port_block()
    env = services.env() | {
        "QUEUECORE_KAFKA_PORT": str(kafka_port),
        "QUEUECORE_DATABASE_URL": postgres.url,
        "QUEUECORE_HTTP_PORT": str(port),
        "QUEUECORE_DATABASE_STATEMENT_TIMEOUT_MS": str(STATEMENT_MS),
        "QUEUECORE_DATABASE_REQUEST_TIMEOUT_MS": str(REQUEST_MS),
        "QUEUECORE_WRITER_RESOLVE_MS": str(RESOLVE_MS),
        "QUEUECORE_DATABASE_POOL_MAX": str(POOL_MAX),
    }
    log = root / "serve.log"
    proc = queuecore(["serve", "--workers", "1"], env, log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: http_status(f"{url}/readyz") == 200, 60, "api ready", proc, log)
        key = org.keys["production"].secret
        topic = f"frozen-{secrets.token_hex(3)}"
        with httpx.Client(base_url=url, headers=bearer(key), timeout=30) as http:
            assert http.post("/v1/topics", json={"name": topic}).status_code == 201
        yield Frozen(postgres, url, key, topic, f"127.0.0.1:{kafka_port}")
    finally:
        if postgres.process is not None:
            signal_tree(postgres.process, signal.SIGCONT)
        stop(proc)


@dataclass
class Answer:
    """One request made while PostgreSQL was frozen."""

    what: str
    status: int | None
    code: str | None
    elapsed_s: float
    body: Any


async def _timed(http: httpx.AsyncClient, what: str, method: str, path: str, **kw: Any) -> Answer:
    started = time.monotonic()
    try:
        response = await http.request(method, path, **kw)
    except httpx.HTTPError as exc:
        return Answer(what, None, type(exc).__name__, time.monotonic() - started, None)
    elapsed_s = time.monotonic() - started
    body = response.json()
    code = body.get("error", {}).get("code") if isinstance(body, dict) else None
    return Answer(what, response.status_code, code, elapsed_s, body)


async def _during_freeze(frozen: Frozen, base: str, member: str, ack_id: str) -> list[Answer]:
    """Requests of every kind, all at once, on a stopped PostgreSQL."""
    keys = [f"frozen-{secrets.token_hex(4)}" for _ in range(3)]
    async with httpx.AsyncClient(
        base_url=frozen.url, headers=bearer(frozen.key), timeout=FREEZE_S * 3
    ) as http:
        publish = f"/v1/topics/{frozen.topic}/messages"
        calls = [
            _timed(http, f"keyed {k}", "POST", publish, json={"data": k, "idempotencyKey": k})
            for k in keys
        ]  # the key lookup waits on PostgreSQL first
        calls += [_timed(http, "publish", "POST", publish, json={"data": n}) for n in range(3)]
        group = f"/v1/topics/{frozen.topic}/groups/g"
        calls += [
            _timed(http, "readyz", "GET", "/readyz"),
            _timed(http, "list topics", "GET", "/v1/topics"),
            _timed(http, "create topic", "POST", "/v1/topics", json={"name": f"{base}-new"}),
            _timed(http, "ack", "POST", f"{group}/ack", json={"ackIds": [ack_id]}),
            _timed(http, "heartbeat", "POST", f"{group}/members/{member}/heartbeat"),
            _timed(http, "pull", "POST", f"{group}/members/{member}/pull", json={}),
        ]
        return list(await asyncio.gather(*calls))


def _warm_up(frozen: Frozen) -> tuple[str, str]:
    """A member that holds one delivery (for an ack), and every cache of the API warm."""
    with httpx.Client(base_url=frozen.url, headers=bearer(frozen.key), timeout=30) as http:
        topic = frozen.topic
        joined = http.post(f"/v1/topics/{topic}/groups/g/members", json={"clientId": "c"})
        assert joined.status_code in (200, 201), joined.text
        member = joined.json()["memberId"]
        assert http.post(f"/v1/topics/{topic}/messages", json={"data": 1}).status_code == 201
        pulled = http.post(
            f"/v1/topics/{topic}/groups/g/members/{member}/pull",
            json={"maxMessages": 1, "waitMs": 2000},
        ).json()["messages"]
        assert pulled, "nothing to ack"
        assert http.get("/v1/topics").status_code == 200
        return member, pulled[0]["ackId"]


def test_every_request_is_bounded_while_postgres_is_frozen(frozen: Frozen) -> None:
    member, ack_id = _warm_up(frozen)
    base = f"frozen-{secrets.token_hex(3)}"
    before = frozen.backends()

    frozen.freeze()
    try:
        answers = asyncio.run(_during_freeze(frozen, base, member, ack_id))
    finally:
        frozen.thaw()
    slow = [a for a in answers if a.elapsed_s > BOUND_S]
    assert not slow, f"outlived the bound of {BOUND_S} s: {slow}"
    readyz = next(a for a in answers if a.what == "readyz")
    assert readyz.status == 503 and readyz.elapsed_s <= CHECK_TIMEOUT_S + 1.0, readyz
    assert readyz.body["checks"]["postgres"].startswith("unreachable"), readyz
    for answer in answers:
        assert answer.status == 503, answer  # never a 500, never a client-side timeout
        assert answer.code in ("SERVICE_UNAVAILABLE", "PUBLISH_OUTCOME_UNKNOWN"), answer
        assert answer.body["error"]["status"] == 503 and answer.body["error"]["requestId"]

    _after_the_thaw(frozen, base, answers, before)


def test_kafka_requests_are_bounded_while_postgres_is_frozen(frozen: Frozen) -> None:
    """The Kafka listener's requests wait on PostgreSQL under the same bound as HTTP requests:
    a produce or a fetch answers a retriable error code (never UNKNOWN_SERVER_ERROR), and a key
    that cannot be checked (SASL, or the periodic revocation check) ends the connection for the
    client to retry, all in time, never after the whole freeze. After the thaw it works again."""
    producer, fetcher = _kafka_client(frozen), _kafka_client(frozen)
    try:
        assert producer.produce(frozen.topic, 0, batch_of([b'"warm"']))[1].error_code == 0
        frozen.freeze()
        try:
            produced = _kafka_timed(
                lambda: producer.produce(frozen.topic, 0, batch_of([b'"frozen"']))[1]
            )
            fetched = _kafka_timed(lambda: _fetch(fetcher, frozen.topic))
            time.sleep(RECHECK_KEY_S + CACHE_TTL_S)  # keys are checked again, not from a cache
            rechecked = _kafka_timed(lambda: _fetch(fetcher, frozen.topic))
            login = _kafka_timed(lambda: _kafka_client(frozen))
        finally:
            frozen.thaw()
    finally:
        producer.close()
        fetcher.close()
    assert produced.elapsed_s <= BOUND_S and produced.status in (7, 56), produced
    for answer in (fetched, rechecked, login):  # no publish: no wait for a commit's outcome
        assert answer.elapsed_s <= KAFKA_BOUND_S, answer
    assert fetched.status in (56, None), fetched  # KAFKA_STORAGE_ERROR, or the key recheck
    assert (rechecked.status, login.status) == (None, None), (rechecked, login)
    deadline = time.monotonic() + 15
    while True:
        with contextlib.suppress(ConnectionError, AssertionError):
            raw = _kafka_client(frozen)
            code = raw.produce(frozen.topic, 0, batch_of([b'"thawed"']))[1].error_code
            raw.close()
            if code == 0:
                break
        assert time.monotonic() < deadline, "no produce succeeded after the thaw"
        time.sleep(0.2)


def _kafka_client(frozen: Frozen) -> RawClient:
    """A connection to the Kafka listener, authenticated."""
    raw = RawClient(frozen.bootstrap, timeout_s=FREEZE_S * 3)
    assert raw.login(frozen.key).error_code == 0
    return raw


def _kafka_timed(call: Callable[[], Any]) -> Answer:
    """A Kafka call: its error code (None: the server closed the connection) and how long."""
    started = time.monotonic()
    try:
        result = call()
    except (ConnectionError, OSError) as exc:
        return Answer("kafka", None, type(exc).__name__, time.monotonic() - started, None)
    code = getattr(result, "error_code", 0)
    return Answer("kafka", code, None, time.monotonic() - started, result)


def _fetch(raw: RawClient, topic: str) -> Any:
    """One Fetch (v4) of partition 0 from offset 0, up to 3 s for a byte; its partition's
    answer."""
    cls = wire.request_type(Api.FETCH, 4)
    partition = wire.entity(
        wire.nested(cls, "FetchPartition"), partition=0, fetch_offset=0, partition_max_bytes=1 << 20
    )
    fetch_topic = wire.entity(wire.nested(cls, "FetchTopic"), topic=topic, partitions=(partition,))
    response = raw.request(
        Api.FETCH,
        4,
        replica_id=-1,
        max_wait=datetime.timedelta(seconds=3),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        topics=(fetch_topic,),
    )
    return response.responses[0].partitions[0]


def _after_the_thaw(frozen: Frozen, base: str, answers: list[Answer], before: int) -> None:
    """What the frozen requests left: nothing a "not written" answer denied, no stale
    connection, no pile of backends."""
    with httpx.Client(base_url=frozen.url, headers=bearer(frozen.key), timeout=30) as http:
        # The first requests after the thaw already work: no connection from before the freeze
        # (its transaction ended by PostgreSQL meanwhile) is handed out again.
        for n in range(10):
            published = http.post(f"/v1/topics/{frozen.topic}/messages", json={"data": n})
            assert published.status_code == 201, published.text
        assert http.get(f"/v1/topics/{base}-new").status_code == 404  # its commit was never sent
        for answer in answers:
            if answer.what.startswith("keyed") and answer.code == "SERVICE_UNAVAILABLE":
                key = answer.what.split()[1]
                found = http.get(f"/v1/topics/{frozen.topic}/messages/by-idempotency-key/{key}")
                assert found.status_code == 404, f"{key} was answered 503 but stored"
    deadline = time.monotonic() + 15
    while frozen.backends() > before + POOL_MAX and time.monotonic() < deadline:
        time.sleep(0.5)
    assert frozen.backends() <= before + POOL_MAX, (before, frozen.backends())
