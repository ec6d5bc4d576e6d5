"""The object store, metered: every call timed and its errors counted (the metric catalogue's
``queuecore.object_store.*``). A wrapper around any :class:`core.object_store.ObjectStore`."""

from __future__ import annotations

from core.object_store import ListedObject, ObjectStore, S3ObjectStore
from core.settings import ObjectStoreSettings
from observability.metrics import object_store_call


class MeteredObjectStore:
    """An :class:`ObjectStore` that times every call of ``inner`` and counts its errors.

    Labelled by operation only (``put``, ``get``, ``delete``, ``list``, ``ping``; sync and
    async alike), never by key: one record per call, which is one S3 request except for
    ``delete`` and the listings (batched, paginated).
    """

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key``."""
        with object_store_call("put"):
            self.inner.put(key, data)

    async def put_async(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` without blocking the event loop."""
        with object_store_call("put"):
            await self.inner.put_async(key, data)

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """Read an object or an inclusive byte range of it."""
        with object_store_call("get"):
            return self.inner.get(key, start, end)

    async def get_async(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """Read without blocking the event loop."""
        with object_store_call("get"):
            return await self.inner.get_async(key, start, end)

    def delete(self, keys: list[str]) -> None:
        """Delete objects."""
        with object_store_call("delete"):
            self.inner.delete(keys)

    def list_keys(self, prefix: str = "") -> list[str]:
        """Every key under ``prefix``."""
        with object_store_call("list"):
            return self.inner.list_keys(prefix)

    def list_objects(self, prefix: str = "") -> list[ListedObject]:
        """Every object under ``prefix`` with its age, when ``inner`` can list them so."""
        lister = getattr(self.inner, "list_objects", None)
        if lister is None:
            raise TypeError(f"{type(self.inner).__name__} cannot list objects with their ages")
        with object_store_call("list"):
            return list(lister(prefix))

    def ping(self) -> None:
        """Raise unless the bucket is reachable."""
        with object_store_call("ping"):
            self.inner.ping()


def metered_store(settings: ObjectStoreSettings) -> ObjectStore:
    """The process's object store: S3, metered."""
    return MeteredObjectStore(S3ObjectStore.from_settings(settings))
