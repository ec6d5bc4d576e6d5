-- A pusher's failed attempt at a message it keeps leased (an ordered push group): counted, the lease kept.
UPDATE group_deliveries SET attempt = attempt + 1, last_error = %(error)s, updated_at = now()
WHERE group_id = %(group_id)s AND ack_id = %(ack_id)s AND state = 'leased' AND lease_until > now()
RETURNING attempt
