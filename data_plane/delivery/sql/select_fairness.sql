-- A fair group's settings (no row: not fair, or no longer).
SELECT enabled, weights, default_weight, quantum FROM group_fairness WHERE group_id = %(group_id)s
