UPDATE group_leases SET lease_until = clock_timestamp() + make_interval(secs => %(seconds)s)
WHERE group_id = %(group_id)s AND lease_id = ANY(%(lease_ids)s) AND open_count > 0 AND lease_until > now()
RETURNING lease_id
