-- The first block still inside retention; everything before it is dropped.
SELECT min(base_offset) AS base_offset FROM segment_blocks
WHERE topic_id = %(topic_id)s AND partition = %(partition)s
  AND max_timestamp_ms >= (extract(epoch FROM now()) * 1000)::bigint - %(retention_s)s * 1000
