-- The rounds of a fair pull's partitions: each key still pending, its deficit and place.
INSERT INTO fair_deficits (group_id, partition, fairness_key, deficit, turn)
SELECT %(group_id)s, v.partition, v.fairness_key, v.deficit, v.turn
FROM unnest(%(partitions)s::int[], %(keys)s::text[], %(deficits)s::bigint[], %(turns)s::int[])
  AS v(partition, fairness_key, deficit, turn)
