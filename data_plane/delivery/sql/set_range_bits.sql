-- New bitmaps for leases; with %(strict)s (an exactly-once ack) only where the lease is current.
UPDATE group_leases l SET acked = v.acked::varbit, done = v.done::varbit, open_count = v.open_count
FROM unnest(%(lease_ids)s::text[], %(acked)s::text[], %(done)s::text[], %(open_counts)s::int[])
  AS v(lease_id, acked, done, open_count)
WHERE l.group_id = %(group_id)s AND l.lease_id = v.lease_id AND (NOT %(strict)s OR l.lease_until > now())
RETURNING l.lease_id
