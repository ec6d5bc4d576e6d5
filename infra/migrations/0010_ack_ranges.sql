-- An ack request of range ackIds in one round trip (docs/decisions.md §17). It took two: the
-- partitions locked and the leases read, then, once the client had checked every id, the new
-- bitmaps, the committed offsets and the COMMIT. In the common case (every named offset still
-- open in its lease, and the lease current where that matters) the check needs nothing the
-- database does not hold, so this function makes it. Called in autocommit mode it is the whole
-- transaction, its commit included (with the WAL flush: an ack must survive a crash).
--
-- qc_commit_progress is COMMIT_PROGRESS (data_plane/group_queries.py) as a function, so this one
-- can move the committed offsets in the same transaction; the Python constant calls it too.

-- qc_commit_progress: defined in data_plane/delivery/functions/qc_commit_progress.sql, applied after every migration.

-- p_masks[i] names the offsets of lease p_lease_ids[i] to ack: bit j (from the left) is the
-- offset first_offset + j, and the text may be shorter than the lease (the rest is '0'). A lease
-- is acked only when every named offset is still open in it (not acked, not handed over to a
-- per-message row) and, with p_strict (exactly-once), the lease has not expired; the partitions
-- are locked first, in partition order, as pulls, acks and removals lock them. Returns the
-- leases acked; the client settles the ids of the others one by one, as before.
-- qc_ack_ranges: defined in data_plane/delivery/functions/qc_ack_ranges.sql, applied after every migration.
