UPDATE group_deliveries SET state = 'acked', lease_until = NULL, updated_at = now()
WHERE group_id = %(group_id)s AND ack_id = ANY(%(ack_ids)s) AND state = 'leased'
  AND (NOT %(strict)s OR lease_until > now())
RETURNING ack_id, partition
