-- A group's fairness settings and onFailure hook, as its description shows them.
SELECT f.enabled, f.weights, f.default_weight, f.quantum, h.on_failure
FROM consumer_groups g
LEFT JOIN group_fairness f ON f.group_id = g.id
LEFT JOIN group_hooks h ON h.group_id = g.id
WHERE g.id = %(group_id)s
