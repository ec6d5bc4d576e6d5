-- Range leases are kept for a while after every offset in them is settled (docs/decisions.md
-- §19), so an ack sent again (its response was lost, the client retried) is answered "acked"
-- instead of "unknown ackId": a consumer on an exactly-once topic must be able to tell a
-- repeated ack from a lease it lost. They were deleted as soon as the committed offset passed
-- them; now the data_plane.purge_settled_leases task deletes them some minutes after their
-- lease ended.
--
-- The committed-offset rule looks only at open leases: a partial index keeps the kept settled
-- leases out of its scan, and another finds the settled ones to purge.

CREATE INDEX group_leases_open_partition_idx ON group_leases (group_id, partition, first_offset)
    WHERE open_count > 0;
CREATE INDEX group_leases_settled_idx ON group_leases (lease_until) WHERE open_count = 0;

CREATE OR REPLACE FUNCTION qc_commit_progress(p_group_id text, p_partitions integer[])
RETURNS TABLE (partition integer, committed_offset bigint)
LANGUAGE sql AS $$
WITH moved AS (
  UPDATE group_partitions gp SET committed_offset = greatest(gp.committed_offset, least(
      (SELECT min(d."offset") FROM group_deliveries d
        WHERE d.group_id = gp.group_id AND d.partition = gp.partition AND d.state IN ('leased', 'retry')),
      (SELECT min(l.first_offset + position(B'0' IN l.done) - 1) FROM group_leases l
        WHERE l.group_id = gp.group_id AND l.partition = gp.partition AND l.open_count > 0),
      gp.delivered_offset))
  WHERE gp.group_id = p_group_id AND gp.partition = ANY(p_partitions)
  RETURNING gp.partition, gp.committed_offset
), forgotten_rows AS (
  DELETE FROM group_deliveries d USING moved
  WHERE d.group_id = p_group_id AND d.partition = moved.partition AND d."offset" < moved.committed_offset
)
SELECT moved.partition, moved.committed_offset FROM moved
$$;
