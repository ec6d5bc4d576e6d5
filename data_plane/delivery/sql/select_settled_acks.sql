-- Tombstones of leases and per-message rows that qc_commit_progress forgot (migration 0012): what
-- was acked through them, read only when an ack names a lease that is gone.
SELECT ack_key, acked::text AS acked FROM settled_acks
WHERE group_id = %(group_id)s AND ack_key = ANY(%(keys)s)
