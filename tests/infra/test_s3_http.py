"""The asyncio PUT client: signatures AWS accepts, and round trips through a real S3 server."""

from __future__ import annotations

import asyncio
import calendar
import hashlib
import socket
import time
from collections.abc import Callable
from dataclasses import replace
from urllib.parse import quote

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from core import settings
from core.object_store import ObjectNotFound, S3ObjectStore
from core.s3_http import Credentials, Endpoint, S3HttpClient, S3RequestFailed, SigV4Signer
from tests.support.services import Services


@pytest.mark.parametrize("token", [None, "session-token/with+odd=chars"])
@pytest.mark.parametrize("key", ["segments/2026/11/26/abc.seg", "odd keys/ä + b=c~d.seg"])
def test_signature_is_the_one_botocore_computes(token: str | None, key: str) -> None:
    """AWS and MinIO verify signatures; SeaweedFS in tests does not, so compare with botocore."""
    endpoint = Endpoint.parse("https://s3.eu-west-1.amazonaws.com", "eu-west-1")
    data = b"segment bytes"
    digest = hashlib.sha256(data).hexdigest()
    path = quote(f"/bucket-name/{key}", safe="/-_.~")
    reference = AWSRequest(
        method="PUT",
        url=f"https://{endpoint.host_header}{path}",
        data=data,
        headers={"x-amz-content-sha256": digest},
    )
    S3SigV4Auth(BotoCredentials("AKIDEXAMPLE", "secret/key+x", token), "s3", "eu-west-1").add_auth(
        reference
    )
    stamp = reference.headers["X-Amz-Date"]
    now = calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ"))
    signer = SigV4Signer("eu-west-1", lambda: Credentials("AKIDEXAMPLE", "secret/key+x", token))

    ours = signer.headers("PUT", endpoint.host_header, path, digest, now=now)

    assert ours["authorization"] == reference.headers["Authorization"]
    assert ours["x-amz-date"] == stamp
    assert ours.get("x-amz-security-token") == token


def test_endpoint_defaults_to_the_regional_aws_endpoint() -> None:
    assert Endpoint.parse(None, "eu-central-1") == Endpoint(
        "https", "s3.eu-central-1.amazonaws.com", 443, "s3.eu-central-1.amazonaws.com", ""
    )
    local = Endpoint.parse("http://127.0.0.1:8333", "us-east-1")
    assert (local.port, local.host_header) == (8333, "127.0.0.1:8333")


@pytest.fixture
def store(services: Services, unique: Callable[[str], str]) -> S3ObjectStore:
    return replace(S3ObjectStore.from_settings(settings.object_store()), prefix=unique("aput"))


@pytest.mark.parametrize("threads", [8, 0], ids=["put-threads", "on-the-loop"])
@pytest.mark.parametrize("size", [0, 1024, 60_000, 3 * 1024 * 1024 + 7])
def test_put_async_stores_exact_bytes(store: S3ObjectStore, size: int, threads: int) -> None:
    store.http.put_threads = threads
    data = bytes(i % 251 for i in range(size))

    asyncio.run(store.put_async("seg/odd name ä+b.seg", data))

    assert store.get("seg/odd name ä+b.seg") == data


def test_a_pooled_connection_that_died_is_replaced(store: S3ObjectStore) -> None:
    async def scenario() -> None:
        await store.put_async("one", b"1")
        assert await store.get_async("one") == b"1"  # GETs pool their connections on the loop
        assert store.http._idle
        for connection in store.http._idle:
            connection.writer.transport.abort()  # as when the server closes an idle connection
        assert await store.get_async("one") == b"1"

    asyncio.run(scenario())


def test_server_error_is_raised_with_its_code(store: S3ObjectStore) -> None:
    missing_bucket = replace(store, bucket="qc-no-such-bucket-here")

    with pytest.raises(S3RequestFailed) as failure:
        asyncio.run(missing_bucket.put_async("x", b"x"))

    # SeaweedFS answers 403 AccessDenied, AWS 404 NoSuchBucket: either way a 4xx with its code.
    assert 400 <= failure.value.status < 500
    assert failure.value.code in {"NoSuchBucket", "AccessDenied"}


def test_get_async_reads_whole_objects_and_ranges(store: S3ObjectStore) -> None:
    data = bytes(i % 251 for i in range(200_000))
    store.put("seg/ranged ä.seg", data)

    async def reads() -> list[bytes]:
        return list(
            await asyncio.gather(
                store.get_async("seg/ranged ä.seg"),
                store.get_async("seg/ranged ä.seg", 10, 19),
                store.get_async("seg/ranged ä.seg", 199_990),
            )
        )

    assert asyncio.run(reads()) == [data, data[10:20], data[199_990:]]


def test_get_async_of_a_missing_key_is_object_not_found(store: S3ObjectStore) -> None:
    with pytest.raises(ObjectNotFound):
        asyncio.run(store.get_async("never/written"))


def test_a_pooled_put_connection_that_died_is_replaced(store: S3ObjectStore) -> None:
    store.http.put_threads = 2

    async def scenario() -> None:
        await store.put_async("one", b"1")
        assert store.http._idle_blocking  # PUTs pool their connections in the PUT threads
        for connection in store.http._idle_blocking:
            connection.sock.shutdown(socket.SHUT_RDWR)  # as when the server closes it
        await store.put_async("two", b"2")

    asyncio.run(scenario())

    assert store.get("two") == b"2"


def test_a_stalled_put_fails_within_the_request_timeout(store: S3ObjectStore) -> None:
    silent = socket.socket()  # accepts connections (the kernel's backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    port = silent.getsockname()[1]
    stalled = S3HttpClient(
        Endpoint.parse(f"http://127.0.0.1:{port}", "us-east-1"),
        store.http.signer,
        request_timeout_s=0.5,
        put_threads=2,
    )
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        asyncio.run(stalled.put_object(store.bucket, "never", b"x" * 1000))
    assert time.monotonic() - started < 3  # not retried: one timeout, then the answer
    silent.close()
