SELECT partition, "offset", state, attempt, ack_id, lease_until, lease_until <= now() AS expired, first_delivered_at
FROM group_deliveries WHERE group_id = %(group_id)s AND ack_id = %(ack_id)s FOR UPDATE
