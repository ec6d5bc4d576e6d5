UPDATE group_leases SET lease_until = now()
WHERE group_id = %(group_id)s AND member_id = ANY(%(member_ids)s) AND open_count > 0 AND lease_until > now()
