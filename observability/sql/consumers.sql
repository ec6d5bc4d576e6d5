-- Per consumer group and partition: its owner (member and client id, '' when unassigned), the
-- committed and delivered offsets, the end offset and the backlog (end - committed, never < 0)
-- and the owner's last heartbeat. Bounded by %(limit)s rows.
SELECT t.organisation_id, e.project_id, e.name AS environment, t.name AS topic, g.name AS "group",
       coalesce(m.id, '') AS member, coalesce(m.client_id, '') AS client, gp.partition,
       gp.committed_offset, gp.delivered_offset, p.next_offset AS end_offset,
       greatest(p.next_offset - gp.committed_offset, 0) AS backlog,
       (extract(epoch FROM m.last_heartbeat_at) * 1000)::bigint AS last_activity_ms
FROM group_partitions gp
JOIN consumer_groups g ON g.id = gp.group_id
JOIN topics t ON t.id = g.topic_id AND t.status = 'active'
JOIN environments e ON e.id = g.environment_id
JOIN partitions p ON p.topic_id = g.topic_id AND p.partition = gp.partition
LEFT JOIN group_members m ON m.id = gp.owner_member_id
ORDER BY gp.group_id, gp.partition
LIMIT %(limit)s
