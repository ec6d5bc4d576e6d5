-- Offsets leaving a range lease (nack, partial extend, expiry) become per-message leases with the
-- range's ack id, attempt 1 and its lease end, so the per-message rules take over from there.
-- An offset that has a row already is one a replay put back (a seek back leased it afresh while
-- its dead letter waited): that row delivers it, once.
INSERT INTO group_deliveries (group_id, partition, "offset", state, attempt, ack_id, member_id, lease_until,
                              first_delivered_at)
SELECT %(group_id)s, v.p, v.o, 'leased', 1, v.a, v.m, v.u, v.d
FROM unnest(%(p)s::int[], %(o)s::bigint[], %(a)s::text[], %(m)s::text[], %(u)s::timestamptz[], %(d)s::timestamptz[])
  AS v(p, o, a, m, u, d)
ON CONFLICT (group_id, partition, "offset") DO NOTHING
