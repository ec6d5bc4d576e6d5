-- Every push group of an active topic, with what a pusher needs to deliver it.
SELECT p.group_id, g.name AS group_name, g.environment_id, e.organisation_id, t.name AS topic,
       p.endpoint, p.max_in_flight, p.timeout_ms, p.ordered, p.secret
FROM group_push p
JOIN consumer_groups g ON g.id = p.group_id
JOIN topics t ON t.id = g.topic_id AND t.status = 'active'
JOIN environments e ON e.id = g.environment_id
ORDER BY p.group_id
