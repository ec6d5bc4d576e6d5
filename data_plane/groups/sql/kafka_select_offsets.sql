-- A Kafka group's committed offsets, per topic of the environment (OffsetFetch).
SELECT t.name AS topic, gp.partition, gp.committed_offset, gp.commit_metadata
FROM consumer_groups g
JOIN topics t ON t.id = g.topic_id AND t.status = 'active'
JOIN group_partitions gp ON gp.group_id = g.id
WHERE g.environment_id = %(environment_id)s AND g.name = %(name)s AND g.protocol = 'kafka'
  AND gp.commit_metadata IS NOT NULL
