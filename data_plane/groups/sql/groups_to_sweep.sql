-- The periodic sweep's work list: groups of active topics (of one topic, when given) with a
-- member silent past its session timeout, or fewer partitions than their topic (it grew). Scans,
-- on purpose: an index on last_heartbeat_at would cost every pull (qc_pull) its HOT update,
-- and the tables hold one row per joined consumer and per group partition.
SELECT g.id FROM consumer_groups g
JOIN topics t ON t.id = g.topic_id AND t.status = 'active'
WHERE (%(topic_id)s::text IS NULL OR g.topic_id = %(topic_id)s::text)
  AND (EXISTS (SELECT 1 FROM group_members m
               WHERE m.group_id = g.id
                 AND greatest(m.last_heartbeat_at, qc_silence_origin(%(gap_s)s))
                     < now() - make_interval(secs => m.session_timeout_ms / 1000.0))
       OR (SELECT count(*) FROM group_partitions gp WHERE gp.group_id = g.id) < t.partitions)
ORDER BY g.id
