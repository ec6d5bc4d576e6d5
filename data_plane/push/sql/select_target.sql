-- One push group of an environment's topic, as select_targets.sql shows it.
SELECT p.group_id, g.name AS group_name, g.environment_id, e.organisation_id, t.name AS topic,
       p.endpoint, p.max_in_flight, p.timeout_ms, p.ordered, p.secret
FROM group_push p
JOIN consumer_groups g ON g.id = p.group_id
JOIN topics t ON t.id = g.topic_id AND t.status = 'active'
JOIN environments e ON e.id = g.environment_id
WHERE g.environment_id = %(environment_id)s AND t.name = %(topic)s AND g.name = %(group)s
