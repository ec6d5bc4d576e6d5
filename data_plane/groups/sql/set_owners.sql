UPDATE group_partitions gp SET owner_member_id = v.owner
FROM unnest(%(partitions)s::int[], %(owners)s::text[]) AS v(partition, owner)
WHERE gp.group_id = %(group_id)s AND gp.partition = v.partition
