-- NO KEY UPDATE, as membership changes lock the group (data_plane.groups.queries.LOCK_GROUP), so
-- dead-lettering and pulls (key-share locks through foreign keys) never wait for the check;
-- SKIP LOCKED: a group another check or a membership change holds is left to the next run.
SELECT g.id, g.environment_id, g.name, g.alert_threshold, g.dlq_alert_raised_at, t.name AS topic
FROM consumer_groups g JOIN topics t ON t.id = g.topic_id AND t.status = 'active'
WHERE g.id = %(group_id)s
FOR NO KEY UPDATE OF g SKIP LOCKED
