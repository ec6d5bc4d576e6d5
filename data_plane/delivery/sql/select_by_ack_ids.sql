SELECT partition, "offset", ack_id FROM group_deliveries WHERE group_id = %(group_id)s AND ack_id = ANY(%(ack_ids)s)
