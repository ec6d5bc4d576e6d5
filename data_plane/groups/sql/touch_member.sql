UPDATE group_members SET last_heartbeat_at = now() WHERE id = %(id)s AND group_id = %(group_id)s RETURNING generation
