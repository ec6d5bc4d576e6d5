-- The first block at or after the earliest retained offset whose newest message is at or after
-- %(timestamp_ms)s: a scan of the partition's primary-key range that stops at the first match.
SELECT base_offset, count FROM segment_blocks
WHERE topic_id = %(topic_id)s AND partition = %(partition)s
  AND base_offset + count > %(earliest)s AND max_timestamp_ms >= %(timestamp_ms)s
ORDER BY base_offset
LIMIT 1
