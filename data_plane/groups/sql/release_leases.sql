UPDATE group_deliveries SET lease_until = now(), updated_at = now()
WHERE group_id = %(group_id)s AND member_id = ANY(%(member_ids)s) AND state = 'leased' AND lease_until > now()
