"""The S3 object store against a real S3 server (SeaweedFS here; MinIO or AWS S3 unchanged)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from core import settings
from core.object_store import ObjectNotFound, S3ObjectStore
from tests.support.services import Services


@pytest.fixture
def store(services: Services, unique: Callable[[str], str]) -> S3ObjectStore:
    base = S3ObjectStore.from_settings(settings.object_store())
    return S3ObjectStore(client=base.client, bucket=base.bucket, prefix=unique("store"))


def test_put_get_and_ranged_get(store: S3ObjectStore) -> None:
    store.put("seg/0001", b"0123456789abcdef")
    assert store.get("seg/0001") == b"0123456789abcdef"
    assert store.get("seg/0001", 4, 7) == b"4567"
    assert store.get("seg/0001", 10) == b"abcdef"


def test_list_is_scoped_to_prefix_and_delete_removes(store: S3ObjectStore) -> None:
    for name in ("a/1", "a/2", "b/1"):
        store.put(name, name.encode())
    assert sorted(store.list_keys("a/")) == ["a/1", "a/2"]
    store.delete(["a/1", "missing"])
    assert sorted(store.list_keys()) == ["a/2", "b/1"]


def test_missing_object_is_object_not_found(store: S3ObjectStore) -> None:
    with pytest.raises(ObjectNotFound):
        store.get("nope")


def test_ping_fails_for_missing_bucket(store: S3ObjectStore) -> None:
    store.ping()
    with pytest.raises(Exception):
        S3ObjectStore(client=store.client, bucket="no-such-bucket-qc").ping()
