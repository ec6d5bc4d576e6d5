-- A fair pull's range leases: one per run of consecutive offsets it picked (several per partition).
INSERT INTO group_leases (group_id, partition, lease_id, first_offset, last_offset, member_id, lease_until, acked, done,
                          open_count)
SELECT %(group_id)s, v.partition, v.lease_id, v.first_offset, v.last_offset, %(member_id)s,
       clock_timestamp() + make_interval(secs => %(ack_timeout_s)s),
       repeat('0', (v.last_offset - v.first_offset + 1)::int)::varbit,
       repeat('0', (v.last_offset - v.first_offset + 1)::int)::varbit,
       (v.last_offset - v.first_offset + 1)::int
FROM unnest(%(partitions)s::int[], %(lease_ids)s::text[], %(first_offsets)s::bigint[], %(last_offsets)s::bigint[])
  AS v(partition, lease_id, first_offset, last_offset)
