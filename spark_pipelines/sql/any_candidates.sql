-- Whether any partition has two candidate blocks next to each other (the Celery task's check
-- before it starts a JVM).
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
