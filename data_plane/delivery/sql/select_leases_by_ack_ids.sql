SELECT ack_id, partition, "offset", state, lease_until <= now() AS expired FROM group_deliveries
WHERE group_id = %(group_id)s AND ack_id = ANY(%(ack_ids)s)
