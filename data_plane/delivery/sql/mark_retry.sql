UPDATE group_deliveries SET state = 'retry', ack_id = NULL, lease_until = NULL, last_error = %(error)s,
       available_at = now() + make_interval(secs => %(delay_s)s), updated_at = now()
WHERE group_id = %(group_id)s AND partition = %(partition)s AND "offset" = %(offset)s
