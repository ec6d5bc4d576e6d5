UPDATE group_deliveries SET lease_until = clock_timestamp() + make_interval(secs => %(seconds)s), updated_at = now()
WHERE group_id = %(group_id)s AND ack_id = ANY(%(ack_ids)s) AND state = 'leased' AND lease_until > now()
RETURNING ack_id
