-- Make a group fair, or change its fairness settings.
INSERT INTO group_fairness (group_id, enabled, weights, default_weight, quantum)
VALUES (%(group_id)s, true, %(weights)s, %(default_weight)s, %(quantum)s)
ON CONFLICT (group_id) DO UPDATE
  SET enabled = true, weights = excluded.weights, default_weight = excluded.default_weight,
      quantum = excluded.quantum
