-- qc_ack_ranges: the current definition, applied (CREATE OR REPLACE) after every migration.
--
-- An ack request of range ackIds in one round trip (docs/decisions.md §17). It took two: the
-- partitions locked and the leases read, then, once the client had checked every id, the new
-- bitmaps, the committed offsets and the COMMIT. In the common case (every named offset still
-- open in its lease, and the lease current where that matters) the check needs nothing the
-- database does not hold, so this function makes it. Called in autocommit mode it is the whole
-- transaction, its commit included (with the WAL flush: an ack must survive a crash).
--
-- p_masks[i] names the offsets of lease p_lease_ids[i] to ack: bit j (from the left) is the
-- offset first_offset + j, and the text may be shorter than the lease (the rest is '0'). A lease
-- is acked only when every named offset is still open in it (not acked, not handed over to a
-- per-message row) and, with p_strict (exactly-once), the lease has not expired; the partitions
-- are locked first, in partition order, as pulls, acks and removals lock them. Returns the
-- leases acked; the client settles the ids of the others one by one, as before.
CREATE OR REPLACE FUNCTION qc_ack_ranges(
    p_group_id  text,
    p_strict    boolean,
    p_lease_ids text[],
    p_masks     text[]
) RETURNS text[]
LANGUAGE plpgsql AS $$
DECLARE
    v_acked      text[];
    v_partitions integer[];
BEGIN
    PERFORM 1 FROM group_partitions gp
    WHERE gp.group_id = p_group_id AND gp.partition IN (
        SELECT l.partition FROM group_leases l
        WHERE l.group_id = p_group_id AND l.lease_id = ANY(p_lease_ids))
    ORDER BY gp.partition FOR UPDATE;

    WITH named AS (
        SELECT l.lease_id,
               rpad(v.mask, (l.last_offset - l.first_offset + 1)::int, '0')::varbit AS bits
        FROM unnest(p_lease_ids, p_masks) AS v(lease_id, mask)
        JOIN group_leases l ON l.group_id = p_group_id AND l.lease_id = v.lease_id
        WHERE length(v.mask) <= l.last_offset - l.first_offset + 1
    ), acked AS (
        UPDATE group_leases l
        SET acked = l.acked | n.bits, done = l.done | n.bits,
            open_count = l.open_count - bit_count(n.bits)::int
        FROM named n
        WHERE l.group_id = p_group_id AND l.lease_id = n.lease_id
          AND bit_count(l.done & n.bits) = 0
          AND (NOT p_strict OR l.lease_until > now())
        RETURNING l.lease_id, l.partition
    )
    SELECT array_agg(acked.lease_id), array_agg(DISTINCT acked.partition)
    INTO v_acked, v_partitions FROM acked;

    IF v_partitions IS NOT NULL THEN
        PERFORM qc_commit_progress(p_group_id, v_partitions);
    END IF;
    RETURN coalesce(v_acked, '{}');
END;
$$;
