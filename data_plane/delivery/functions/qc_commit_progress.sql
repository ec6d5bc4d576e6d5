-- qc_commit_progress: the current definition, applied (CREATE OR REPLACE) after every migration.
--
-- Moves each given partition's committed offset of a group to the lowest offset not yet done
-- (acked or dead-lettered), searching from the committed offset up, so it never moves back and a
-- dead-letter replay below it neither holds it back nor gets forgotten. Settled range leases and
-- per-message rows below the new committed offset are deleted, each leaving a tombstone of its
-- acked bits in settled_acks, so a repeated ack of a forgotten lease is still answered "acked"
-- (a beat task purges tombstones after ten minutes). Acks (qc_ack_ranges) call it in their own
-- transaction; COMMIT_PROGRESS in data_plane/groups/queries.py calls it for the other paths.
--
-- PL/pgSQL with a generic plan forced: as one SQL statement it was planned afresh on every call,
-- ~0.6 ms of its ~0.75 ms (pg_stat_statements over 60-120 s soaks); PL/pgSQL keeps the plan on
-- PostgreSQL 15-17 too. settled_acks has no foreign key to consumer_groups: its check took a
-- key-share lock on the group row in every ack that forgets a lease (~0.14 ms a call).
CREATE OR REPLACE FUNCTION qc_commit_progress(p_group_id text, p_partitions integer[])
RETURNS TABLE (partition integer, committed_offset bigint)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH moved AS (
  UPDATE group_partitions gp SET committed_offset = greatest(gp.committed_offset, least(
      (SELECT min(d."offset") FROM group_deliveries d
        WHERE d.group_id = gp.group_id AND d.partition = gp.partition AND d."offset" >= gp.committed_offset
          AND d.state IN ('leased', 'retry')),
      (SELECT min(l.first_offset + position(B'0' IN l.done) - 1) FROM group_leases l
        WHERE l.group_id = gp.group_id AND l.partition = gp.partition AND l.open_count > 0),
      gp.delivered_offset))
  WHERE gp.group_id = p_group_id AND gp.partition = ANY(p_partitions)
  RETURNING gp.partition, gp.committed_offset
), forgotten_rows AS (
  DELETE FROM group_deliveries d USING moved
  WHERE d.group_id = p_group_id AND d.partition = moved.partition AND d."offset" < moved.committed_offset
    AND d.state IN ('acked', 'dead')
  RETURNING d.ack_id, d.state
), forgotten_leases AS (
  DELETE FROM group_leases l USING moved
  WHERE l.group_id = p_group_id AND l.partition = moved.partition AND l.last_offset < moved.committed_offset
  RETURNING l.lease_id, l.acked
), tombstones AS (
  INSERT INTO settled_acks (group_id, ack_key, acked)
  SELECT p_group_id, f.lease_id, f.acked FROM forgotten_leases f WHERE bit_count(f.acked) > 0
  UNION ALL
  SELECT p_group_id, f.ack_id, B'1' FROM forgotten_rows f WHERE f.state = 'acked' AND f.ack_id IS NOT NULL
  ON CONFLICT DO NOTHING
)
SELECT moved.partition, moved.committed_offset FROM moved;
END;
$$;
