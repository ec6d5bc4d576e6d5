SELECT lease_id, partition, first_offset, last_offset, acked::text AS acked, done::text AS done, member_id,
       lease_until, true AS expired, delivered_at
FROM group_leases
WHERE group_id = %(group_id)s AND partition = %(partition)s AND open_count > 0 AND lease_until <= now()
ORDER BY first_offset
