-- The deficit round robin of a fair group's partitions: each key's deficit and place.
SELECT partition, fairness_key, deficit, turn FROM fair_deficits
WHERE group_id = %(group_id)s AND partition = ANY(%(partitions)s::int[])
