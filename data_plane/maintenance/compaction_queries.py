"""Every SQL statement of segment compaction (``spark_pipelines.compaction``), named."""

# Blocks that may be merged: in committed objects smaller than %(small_object_bytes)s, older than
# %(min_age_s)s (never the newest blocks, near which writers append), of active topics, in
# (topic_id, partition, base_offset) order so the driver can cut contiguous runs. %(topic_ids)s
# NULL means every topic.
SELECT_CANDIDATE_BLOCKS = """
SELECT b.topic_id, b.partition, b.base_offset, b.count, b.object_key, b.byte_offset,
       b.byte_length
FROM segment_blocks b
JOIN segment_objects o ON o.object_key = b.object_key
JOIN topics t ON t.id = b.topic_id AND t.status = 'active'
WHERE o.size_bytes < %(small_object_bytes)s
  AND b.created_at < now() - make_interval(secs => %(min_age_s)s)
  AND (%(topic_ids)s::text[] IS NULL OR b.topic_id = ANY(%(topic_ids)s::text[]))
ORDER BY b.topic_id, b.partition, b.base_offset
LIMIT %(max_blocks)s
"""

# The partition's sequencer row, locked the way the writer (qc_commit_flush) and retention lock
# it. One partition per swap transaction, so there is no multi-row lock order to get wrong.
LOCK_ACTIVE_PARTITION = """
SELECT p.next_offset FROM partitions p
JOIN topics t ON t.id = p.topic_id AND t.status = 'active'
WHERE p.topic_id = %(topic_id)s AND p.partition = %(partition)s
FOR UPDATE OF p
"""

# The block rows now covering [%(first)s, %(end)s): the swap goes ahead only if they are exactly
# the ones the job read (retention or another compaction may have changed them meanwhile).
SELECT_BLOCKS_IN_RANGE = """
SELECT base_offset, count, object_key, byte_offset, byte_length, created_at
FROM segment_blocks
WHERE topic_id = %(topic_id)s AND partition = %(partition)s
  AND base_offset >= %(first)s AND base_offset < %(end)s
ORDER BY base_offset
"""

INSERT_OBJECT = """
INSERT INTO segment_objects (object_key, size_bytes, block_count)
VALUES (%(object_key)s, %(size_bytes)s, 1)
"""

# Source objects, locked in key order (two swaps of different partitions can share objects),
# stamped so the GC's grace period runs from now.
RELEASE_OBJECTS = """
UPDATE segment_objects SET released_at = now()
WHERE object_key IN (
    SELECT object_key FROM segment_objects WHERE object_key = ANY(%(keys)s)
    ORDER BY object_key FOR UPDATE)
"""

DELETE_BLOCKS_IN_RANGE = """
DELETE FROM segment_blocks
WHERE topic_id = %(topic_id)s AND partition = %(partition)s
  AND base_offset >= %(first)s AND base_offset < %(end)s
"""

# created_at is the newest source block's, so the minimum age still measures the data's age.
INSERT_BLOCK = """
INSERT INTO segment_blocks (topic_id, partition, base_offset, count, object_key, byte_offset,
                            byte_length, min_timestamp_ms, max_timestamp_ms, created_at)
VALUES (%(topic_id)s, %(partition)s, %(first)s, %(count)s, %(object_key)s, %(byte_offset)s,
        %(byte_length)s, %(min_timestamp_ms)s, %(max_timestamp_ms)s, %(created_at)s)
"""

# Whether any partition has two candidate blocks next to each other (the Celery task's check
# before it starts a JVM).
ANY_CANDIDATES = """
SELECT EXISTS (
    SELECT 1 FROM segment_blocks b
    JOIN segment_objects o ON o.object_key = b.object_key
    JOIN segment_blocks n ON n.topic_id = b.topic_id AND n.partition = b.partition
                         AND n.base_offset = b.base_offset + b.count
    JOIN segment_objects o2 ON o2.object_key = n.object_key
    WHERE o.size_bytes < %(small_object_bytes)s AND o2.size_bytes < %(small_object_bytes)s
      AND n.created_at < now() - make_interval(secs => %(min_age_s)s)
      AND b.created_at < now() - make_interval(secs => %(min_age_s)s)
) AS found
"""
