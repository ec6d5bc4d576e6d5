"""The S3 object store against a real S3 server (SeaweedFS here; MinIO or AWS S3 unchanged)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from core import settings
from core.object_store import ObjectNotFound, S3ObjectStore
from core.settings import ObjectStoreSettings
from tests.support.services import Services


@pytest.fixture
def store(services: Services, unique: Callable[[str], str]) -> S3ObjectStore:
    return replace(S3ObjectStore.from_settings(settings.object_store()), prefix=unique("store"))


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
        replace(store, bucket="no-such-bucket-qc").ping()


def test_the_put_transport_is_chosen_by_configuration(services: Services) -> None:
    env = {**services.env(), "QUEUECORE_S3_PUT_THREADS": "3"}
    threaded = S3ObjectStore.from_settings(ObjectStoreSettings.from_env(env))
    assert threaded.http.put_threads == 3
    on_the_loop = S3ObjectStore.from_settings(ObjectStoreSettings.from_env(services.env()))
    assert on_the_loop.http.put_threads == 0
