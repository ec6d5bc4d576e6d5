-- Blocks that may be merged: in committed objects smaller than %(small_object_bytes)s, older than
-- %(min_age_s)s (never the newest blocks, near which writers append), of active topics, in
-- (topic_id, partition, base_offset) order so the driver can cut contiguous runs. %(topic_ids)s
-- NULL means every topic.
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
