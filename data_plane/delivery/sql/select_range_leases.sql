SELECT lease_id, partition, first_offset, last_offset, acked::text AS acked, done::text AS done, member_id,
       lease_until, lease_until <= now() AS expired, delivered_at
FROM group_leases WHERE group_id = %(group_id)s AND lease_id = ANY(%(lease_ids)s)
