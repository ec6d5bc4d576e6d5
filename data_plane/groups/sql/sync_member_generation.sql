UPDATE group_members SET generation = %(generation)s, last_heartbeat_at = now() WHERE id = %(id)s AND group_id = %(group_id)s
