-- A fair pull's partitions: delivered_offset is the lowest offset not delivered yet; the rounds of
-- these partitions are rewritten next (SAVE_FAIR_DEFICITS), so their old rows go.
WITH advanced AS (
  UPDATE group_partitions gp SET delivered_offset = v.delivered
  FROM unnest(%(partitions)s::int[], %(delivered)s::bigint[]) AS v(partition, delivered)
  WHERE gp.group_id = %(group_id)s AND gp.partition = v.partition AND gp.delivered_offset <> v.delivered
)
DELETE FROM fair_deficits WHERE group_id = %(group_id)s AND partition = ANY(%(partitions)s::int[])
