-- A group's ids and settings for delivery; fair: it has a group_fairness row, on_failure: its
-- hook's source (migration 0026).
SELECT g.*, t.delivery, EXISTS (SELECT 1 FROM group_fairness f WHERE f.group_id = g.id) AS fair,
       (SELECT h.on_failure FROM group_hooks h WHERE h.group_id = g.id) AS on_failure
FROM consumer_groups g JOIN topics t ON t.id = g.topic_id
WHERE g.topic_id = %(topic_id)s AND g.name = %(name)s
