-- The block holding %(offset)s (the last one starting at or before it), then the blocks after it
-- up to %(end)s: two probes of the primary key (topic_id, partition, base_offset).
SELECT base_offset, count, object_key, byte_offset, byte_length
FROM segment_blocks
WHERE topic_id = %(topic_id)s AND partition = %(partition)s
  AND base_offset >= COALESCE(
      (SELECT max(base_offset) FROM segment_blocks
       WHERE topic_id = %(topic_id)s AND partition = %(partition)s AND base_offset <= %(offset)s),
      %(offset)s)
  AND base_offset < %(end)s
ORDER BY base_offset
