-- Consumers are the members within their session timeout (as in TOPIC_STATS): a silent member
-- not yet evicted is not counted.
SELECT g.name, g.generation,
       (SELECT count(*) FROM group_members m
        WHERE m.group_id = g.id
          AND m.last_heartbeat_at >= now() - make_interval(secs => m.session_timeout_ms / 1000.0)) AS consumers,
       coalesce((SELECT sum(greatest(p.next_offset - gp.committed_offset, 0))
                 FROM group_partitions gp JOIN partitions p ON p.topic_id = g.topic_id AND p.partition = gp.partition
                 WHERE gp.group_id = g.id), 0) AS lag,
       (SELECT count(*) FROM dead_letters dl WHERE dl.group_id = g.id AND dl.replayed_at IS NULL) AS dead_letters
FROM consumer_groups g WHERE g.topic_id = %(topic_id)s ORDER BY g.name
