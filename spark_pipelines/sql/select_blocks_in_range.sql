-- The block rows now covering [%(first)s, %(end)s): the swap goes ahead only if they are exactly
-- the ones the job read (retention or another compaction may have changed them meanwhile).
SELECT base_offset, count, object_key, byte_offset, byte_length, created_at
FROM segment_blocks
WHERE topic_id = %(topic_id)s AND partition = %(partition)s
  AND base_offset >= %(first)s AND base_offset < %(end)s
ORDER BY base_offset
