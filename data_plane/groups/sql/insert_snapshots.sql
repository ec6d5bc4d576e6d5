-- Every group of every active topic (of one topic, when given) in one statement: the snapshot of
-- the minute ``at`` (now, by default). A second run in the same minute inserts nothing. Plain
-- reads of group_partitions and partitions: no row locks, so pulls, acks and flushes never wait.
-- Lag as the API reports it (LIST_GROUPS, describe): high watermark - committed offset, never < 0.
INSERT INTO lag_snapshots (group_id, taken_at, partition, environment_id, topic_id, committed_offset, high_watermark,
                           lag)
SELECT g.id, date_trunc('minute', coalesce(%(at)s::timestamptz, now())), gp.partition, g.environment_id, g.topic_id,
       gp.committed_offset, p.next_offset, greatest(p.next_offset - gp.committed_offset, 0)
FROM consumer_groups g
JOIN topics t ON t.id = g.topic_id AND t.status = 'active'
JOIN group_partitions gp ON gp.group_id = g.id
JOIN partitions p ON p.topic_id = g.topic_id AND p.partition = gp.partition
WHERE (%(topic_id)s::text IS NULL OR g.topic_id = %(topic_id)s::text)
ON CONFLICT (group_id, taken_at, partition) DO NOTHING
