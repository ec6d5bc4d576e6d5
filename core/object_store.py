"""Object storage: the :class:`ObjectStore` interface and its S3 implementation.

One implementation, chosen by ``QUEUECORE_OBJECT_STORE_URL`` (``s3://bucket/prefix``), talks to
AWS S3, MinIO and SeaweedFS alike; only the endpoint and credentials differ. The hot paths' PUTs
and ranged GETs go through the asyncio client of :mod:`core.s3_http` (a tenth of boto3's CPU, no
thread blocked; small PUTs from ``QUEUECORE_S3_PUT_THREADS`` threads when set); deletes, listings
and the synchronous calls of the Spark jobs go through boto3. :class:`MeteredObjectStore` wraps any store with a duration histogram and an error
counter per operation; the processes build their stores wrapped (:func:`metered_store`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from core.s3_http import (
    Credentials,
    CredentialsProvider,
    Endpoint,
    S3HttpClient,
    S3RequestFailed,
    SigV4Signer,
)
from core.settings import ObjectStoreSettings

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


class ObjectNotFound(Exception):
    """The key does not exist in the bucket."""

    def __init__(self, key: str) -> None:
        super().__init__(f"object not found: {key}")
        self.key = key


@dataclass(frozen=True, slots=True)
class ListedObject:
    """An object key and when it was last written."""

    key: str
    last_modified: datetime


class ObjectStore(Protocol):
    """What the data plane needs from object storage."""

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` durably before returning."""

    async def put_async(self, key: str, data: bytes) -> None:
        """:meth:`put` on the running event loop."""

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """Read a whole object, or the inclusive byte range ``start``..``end``."""

    async def get_async(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """:meth:`get` on the running event loop."""

    def delete(self, keys: list[str]) -> None:
        """Delete objects; missing keys are not an error."""

    def list_keys(self, prefix: str = "") -> list[str]:
        """Every key under ``prefix``."""

    def ping(self) -> None:
        """Raise unless the bucket is reachable."""


def s3_client(
    endpoint_url: str | None,
    access_key: str | None,
    secret_key: str | None,
    region: str,
    connect_timeout_s: float = 2.0,
    read_timeout_s: float = 5.0,
) -> S3Client:
    """A boto3 S3 client with short timeouts, two attempts at most, path-style addressing."""
    config = Config(
        connect_timeout=connect_timeout_s,
        read_timeout=read_timeout_s,
        retries={"max_attempts": 2, "mode": "standard"},
        s3={"addressing_style": "path"},
        max_pool_connections=50,
    )
    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        aws_access_key_id=access_key or ("queuecore" if endpoint_url else None),
        aws_secret_access_key=secret_key or ("queuecore" if endpoint_url else None),
        region_name=region,
        config=config,
    )


def credentials_provider(settings: ObjectStoreSettings) -> CredentialsProvider:
    """The configured key pair, else boto3's credential chain (env, profile, instance role)."""
    if settings.access_key_id or settings.endpoint_url:
        fixed = Credentials(
            settings.access_key_id or "queuecore", settings.secret_access_key or "queuecore"
        )
        return lambda: fixed
    session = boto3.Session(region_name=settings.region)

    def current() -> Credentials:
        chain = session.get_credentials()  # cached by the session; None when there are none
        if chain is None:
            raise OSError("no AWS credentials found for the object store")
        frozen = chain.get_frozen_credentials()  # refreshes temporary credentials when due
        return Credentials(frozen.access_key or "", frozen.secret_key or "", frozen.token)

    return current


def ensure_bucket(
    endpoint_url: str | None,
    bucket: str,
    access_key: str | None,
    secret_key: str | None,
    region: str,
) -> None:
    """Create the bucket unless it exists."""
    client = s3_client(endpoint_url, access_key, secret_key, region)
    try:
        client.head_bucket(Bucket=bucket)
    except ClientError:
        client.create_bucket(Bucket=bucket)


@dataclass
class S3ObjectStore:
    """:class:`ObjectStore` on any S3-compatible server; keys live under the configured prefix."""

    client: Any  # boto3
    http: S3HttpClient
    bucket: str
    prefix: str = ""

    @classmethod
    def from_settings(cls, settings: ObjectStoreSettings) -> S3ObjectStore:
        """Build from ``QUEUECORE_OBJECT_STORE_URL`` and the ``QUEUECORE_S3_*`` settings."""
        client = s3_client(
            settings.endpoint_url,
            settings.access_key_id,
            settings.secret_access_key,
            settings.region,
            settings.connect_timeout_ms / 1000,
            settings.request_timeout_ms / 1000,
        )
        http = S3HttpClient(
            Endpoint.parse(settings.endpoint_url, settings.region),
            SigV4Signer(settings.region, credentials_provider(settings)),
            connect_timeout_s=settings.connect_timeout_ms / 1000,
            request_timeout_s=settings.request_timeout_ms / 1000,
            put_threads=settings.put_threads,
        )
        return cls(client=client, http=http, bucket=settings.bucket, prefix=settings.prefix)

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key``."""
        self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    async def put_async(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` without blocking the event loop."""
        await self.http.put_object(self.bucket, self._key(key), data)

    async def get_async(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """Read without blocking the event loop; a missing key is :class:`ObjectNotFound`."""
        try:
            return await self.http.get_object(self.bucket, self._key(key), start, end)
        except S3RequestFailed as exc:
            if exc.status == 404:
                raise ObjectNotFound(key) from exc
            raise

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """Read an object or an inclusive byte range of it."""
        extra: dict[str, str] = {}
        if start is not None:
            extra["Range"] = f"bytes={start}-{'' if end is None else end}"
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(key), **extra)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
                raise ObjectNotFound(key) from exc
            raise
        return bytes(response["Body"].read())

    def delete(self, keys: list[str]) -> None:
        """Delete objects in batches of 1000."""
        for first in range(0, len(keys), 1000):
            chunk = [{"Key": self._key(key)} for key in keys[first : first + 1000]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": chunk, "Quiet": True})

    def list_keys(self, prefix: str = "") -> list[str]:
        """Every key under ``prefix``, without the store's own prefix."""
        paginator = self.client.get_paginator("list_objects_v2")
        strip = len(self._key(""))
        keys: list[str] = []
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self._key(prefix)):
            keys.extend(item["Key"][strip:] for item in page.get("Contents", []))
        return keys

    def list_objects(self, prefix: str = "") -> list[ListedObject]:
        """Every object under ``prefix`` with S3's ``LastModified``, without the store's prefix."""
        paginator = self.client.get_paginator("list_objects_v2")
        strip = len(self._key(""))
        listed: list[ListedObject] = []
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self._key(prefix)):
            listed += [
                ListedObject(item["Key"][strip:], item["LastModified"])
                for item in page.get("Contents", [])
            ]
        return listed

    def ping(self) -> None:
        """HEAD the bucket."""
        self.client.head_bucket(Bucket=self.bucket)
