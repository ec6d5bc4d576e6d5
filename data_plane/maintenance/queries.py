"""SQL of the cleanup tasks: topic deletion, orphan GC and retention, named."""

LIST_DELETING_TOPICS = """
SELECT id FROM topics WHERE status = 'deleting' ORDER BY created_at, id
"""

# Partition rows first, in partition order, then the topic row: the writer locks partitions (in a
# fixed order) before its block inserts touch the topic row, so this order cannot deadlock with it.
LOCK_TOPIC_PARTITIONS = """
SELECT partition FROM partitions WHERE topic_id = %(topic_id)s ORDER BY partition FOR UPDATE
"""

LOCK_DELETING_TOPIC = """
SELECT id FROM topics WHERE id = %(topic_id)s AND status = 'deleting' FOR UPDATE
"""

DELETE_TOPIC_BLOCKS = """
WITH gone AS (DELETE FROM segment_blocks WHERE topic_id = %(topic_id)s RETURNING object_key)
SELECT object_key, count(*) AS blocks FROM gone GROUP BY object_key
"""

DELETE_TOPIC_IDEMPOTENCY_KEYS = """
DELETE FROM idempotency_keys WHERE topic_id = %(topic_id)s
"""

DELETE_TOPIC_PARTITIONS = """
DELETE FROM partitions WHERE topic_id = %(topic_id)s
"""

DELETE_TOPIC = """
DELETE FROM topics WHERE id = %(topic_id)s AND status = 'deleting'
"""

# Committed objects among %(keys)s that no block references any more. An object compaction
# moved blocks out of (released_at set) is left to DELETE_EMPTY_OBJECTS: readers may still GET it.
DELETE_UNREFERENCED_OBJECTS = """
DELETE FROM segment_objects o
WHERE o.object_key = ANY(%(keys)s)
  AND o.released_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM segment_blocks b WHERE b.object_key = o.object_key)
RETURNING o.object_key
"""

# Committed objects older than the grace period that no block references (their blocks were
# dropped by retention, deletion or compaction and the object delete did not happen). The grace
# runs from the later of the commit and the last compaction that moved blocks out (released_at).
DELETE_EMPTY_OBJECTS = """
DELETE FROM segment_objects o
WHERE greatest(o.created_at, o.released_at) < now() - make_interval(secs => %(grace_s)s)
  AND NOT EXISTS (SELECT 1 FROM segment_blocks b WHERE b.object_key = o.object_key)
RETURNING o.object_key
"""

SELECT_GC_CURSOR = """
SELECT done_through, full_at FROM maintenance_cursors WHERE name = %(name)s
"""

SAVE_GC_CURSOR = """
INSERT INTO maintenance_cursors (name, done_through, full_at) VALUES (%(name)s, %(done_through)s, %(full_at)s)
ON CONFLICT (name) DO UPDATE
SET done_through = greatest(maintenance_cursors.done_through, excluded.done_through),
    full_at = greatest(maintenance_cursors.full_at, excluded.full_at), updated_at = now()
"""

SELECT_COMMITTED_OBJECTS = """
SELECT object_key FROM segment_objects WHERE object_key = ANY(%(keys)s)
"""

# Partitions of active topics whose first retained block is past the topic's retention.
SELECT_RETENTION_CANDIDATES = """
SELECT p.topic_id, p.partition, t.retention_s
FROM partitions p JOIN topics t ON t.id = p.topic_id
WHERE t.status = 'active'
  AND (SELECT b.max_timestamp_ms FROM segment_blocks b
       WHERE b.topic_id = p.topic_id AND b.partition = p.partition
       ORDER BY b.base_offset LIMIT 1)
      < (extract(epoch FROM now()) * 1000)::bigint - t.retention_s * 1000
ORDER BY p.topic_id, p.partition
"""

LOCK_PARTITION = """
SELECT start_offset, next_offset FROM partitions
WHERE topic_id = %(topic_id)s AND partition = %(partition)s FOR UPDATE
"""

# The first block still inside retention; everything before it is dropped.
SELECT_FIRST_RETAINED_BLOCK = """
SELECT min(base_offset) AS base_offset FROM segment_blocks
WHERE topic_id = %(topic_id)s AND partition = %(partition)s
  AND max_timestamp_ms >= (extract(epoch FROM now()) * 1000)::bigint - %(retention_s)s * 1000
"""

DELETE_BLOCKS_BEFORE = """
WITH gone AS (
    DELETE FROM segment_blocks
    WHERE topic_id = %(topic_id)s AND partition = %(partition)s AND base_offset < %(start_offset)s
    RETURNING object_key)
SELECT object_key, count(*) AS blocks FROM gone GROUP BY object_key
"""

ADVANCE_START_OFFSET = """
UPDATE partitions SET start_offset = GREATEST(start_offset, %(start_offset)s)
WHERE topic_id = %(topic_id)s AND partition = %(partition)s
"""

# Consumer groups that had not yet delivered the dropped offsets skip them: nothing is left to
# deliver there. Their committed offsets then follow (COMMIT_PROGRESS). Runs under the partition
# row lock; group partition rows are locked after it, and nothing locks the two the other way.
SKIP_DROPPED_OFFSETS = """
UPDATE group_partitions gp SET delivered_offset = %(start_offset)s
FROM consumer_groups g
WHERE g.topic_id = %(topic_id)s AND gp.group_id = g.id AND gp.partition = %(partition)s
  AND gp.delivered_offset < %(start_offset)s
RETURNING gp.group_id
"""

DELETE_EXPIRED_IDEMPOTENCY_KEYS = """
DELETE FROM idempotency_keys WHERE expires_at < now()
"""
