-- An ack request's range leases in one statement (migration 0010): partitions locked, the named
-- offsets acked where all of them are open, committed offsets moved; returns the leases acked.
SELECT qc_ack_ranges(%(group_id)s, %(strict)s, %(lease_ids)s::text[], %(masks)s::text[]) AS acked
