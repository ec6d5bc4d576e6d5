"""SQL of the read path, named."""

SELECT_ACTIVE_TOPIC_BY_NAME = """
SELECT id, name, partitions FROM topics
WHERE environment_id = %(environment_id)s AND name = %(name)s AND status = 'active'
"""

SELECT_PARTITION_BOUNDS = """
SELECT t.status, p.start_offset, p.next_offset
FROM partitions p JOIN topics t ON t.id = p.topic_id
WHERE p.topic_id = %(topic_id)s AND p.partition = %(partition)s
"""

# The block holding %(offset)s (the last one starting at or before it), then the blocks after it
# up to %(end)s: two probes of the primary key (topic_id, partition, base_offset).
SELECT_BLOCKS_FROM = """
SELECT base_offset, count, object_key, byte_offset, byte_length
FROM segment_blocks
WHERE topic_id = %(topic_id)s AND partition = %(partition)s
  AND base_offset >= COALESCE(
      (SELECT max(base_offset) FROM segment_blocks
       WHERE topic_id = %(topic_id)s AND partition = %(partition)s AND base_offset <= %(offset)s),
      %(offset)s)
  AND base_offset < %(end)s
ORDER BY base_offset
"""
