-- The consumer_groups row holding a Kafka group's committed offsets on one topic, created on its
-- first commit (with a row per partition at the partition's start, no commit recorded), so the
-- REST API lists the group with its lag. A REST group of that name keeps its protocol 'rest'.
WITH created AS (
    INSERT INTO consumer_groups (id, environment_id, topic_id, name, protocol, start_from)
    VALUES (%(id)s, %(environment_id)s, %(topic_id)s, %(name)s, 'kafka', 'earliest')
    ON CONFLICT (topic_id, name) DO NOTHING
    RETURNING id, protocol
), seeded AS (
    INSERT INTO group_partitions (group_id, partition, committed_offset, delivered_offset)
    SELECT c.id, p.partition, p.start_offset, p.start_offset
    FROM created c JOIN partitions p ON p.topic_id = %(topic_id)s
    ON CONFLICT DO NOTHING
)
SELECT id, protocol FROM created
UNION ALL
SELECT id, protocol FROM consumer_groups WHERE topic_id = %(topic_id)s AND name = %(name)s
LIMIT 1
