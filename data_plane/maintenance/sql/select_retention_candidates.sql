-- Partitions of active topics whose first retained block is past the topic's retention.
SELECT p.topic_id, p.partition, t.retention_s
FROM partitions p JOIN topics t ON t.id = p.topic_id
WHERE t.status = 'active'
  AND (SELECT b.max_timestamp_ms FROM segment_blocks b
       WHERE b.topic_id = p.topic_id AND b.partition = p.partition
       ORDER BY b.base_offset LIMIT 1)
      < (extract(epoch FROM now()) * 1000)::bigint - t.retention_s * 1000
ORDER BY p.topic_id, p.partition
