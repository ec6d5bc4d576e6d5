"""A byte-bounded LRU cache of decoded blocks, keyed by (topic_id, partition, base_offset).

The reader fills it after each ranged GET and the local segment writer fills it with the blocks
it has just committed, so a consumer tailing a partition is served from memory. Blocks are
immutable once committed (compaction rewrites them byte-identical, at the same offsets), so an
entry never goes stale; the reader still checks an entry's length against the index row.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from core.settings import DEFAULT_READ_CACHE_MAX_BYTES
from data_plane.write.segment import Message

BlockKey = tuple[str, int, int]
# Big enough that a group draining a backlog just written reads it from memory, not S3 again.
# Python object overhead of a decoded Message (dataclass, bytes objects, headers dict): counted
# so that many tiny messages cannot grow the cache far past its bound.
_MESSAGE_OVERHEAD_BYTES = 200


def block_size_bytes(messages: Sequence[Message]) -> int:
    """Approximate memory held by a decoded block."""
    total = len(messages) * _MESSAGE_OVERHEAD_BYTES
    total += sum(len(message.value) for message in messages)
    total += sum(len(message.key) for message in messages if message.key)
    for message in messages:
        if message.headers:
            total += sum(len(name) + len(value) for name, value in message.headers.items())
    return total


class CommittedBlockLike(Protocol):
    """What the writer announces after a commit (``data_plane.write.writer.CommittedBlock``)."""

    @property
    def topic_id(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def base_offset(self) -> int: ...
    @property
    def messages(self) -> list[Message]: ...


@dataclass(frozen=True, slots=True)
class CacheStats:
    """Counters for metrics and tests."""

    hits: int
    misses: int
    evictions: int
    entries: int
    size_bytes: int
    max_bytes: int


class BlockCache:
    """Thread-safe LRU of decoded blocks whose total estimated size stays within ``max_bytes``."""

    def __init__(self, max_bytes: int = DEFAULT_READ_CACHE_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[BlockKey, tuple[tuple[Message, ...], int]] = OrderedDict()
        self._size_bytes = 0
        self._lock = threading.Lock()
        self._hits = self._misses = self._evictions = 0

    def get(self, topic_id: str, partition: int, base_offset: int) -> tuple[Message, ...] | None:
        """The cached block, marked most recently used; ``None`` on a miss."""
        key = (topic_id, partition, base_offset)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self._misses += 1
                return None
            self._entries.move_to_end(key)
            self._hits += 1
            return entry[0]

    def put(self, topic_id: str, partition: int, base_offset: int, messages: list[Message]) -> None:
        """Cache a block (a block larger than the whole cache is not kept)."""
        size = block_size_bytes(messages)
        if size > self.max_bytes or not messages:
            return
        key = (topic_id, partition, base_offset)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._size_bytes -= old[1]
            self._entries[key] = (tuple(messages), size)
            self._size_bytes += size
            while self._size_bytes > self.max_bytes:
                _, (_, evicted) = self._entries.popitem(last=False)
                self._size_bytes -= evicted
                self._evictions += 1

    def put_committed(self, blocks: Iterable[CommittedBlockLike]) -> None:
        """The segment writer's after-commit hook: cache the blocks it just wrote."""
        for block in blocks:
            self.put(block.topic_id, block.partition, block.base_offset, block.messages)

    def discard(self, topic_id: str, partition: int, base_offset: int) -> None:
        """Forget one block (the reader found it does not match the index)."""
        with self._lock:
            old = self._entries.pop((topic_id, partition, base_offset), None)
            if old is not None:
                self._size_bytes -= old[1]

    def stats(self) -> CacheStats:
        """A snapshot of the counters."""
        with self._lock:
            return CacheStats(
                self._hits,
                self._misses,
                self._evictions,
                len(self._entries),
                self._size_bytes,
                self.max_bytes,
            )
