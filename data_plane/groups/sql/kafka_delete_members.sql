-- Members leaving, evicted as silent, or dropped for not rejoining a rebalance in time.
DELETE FROM kafka_group_members
WHERE group_id = %(group_id)s AND member_id = ANY(%(member_ids)s)
