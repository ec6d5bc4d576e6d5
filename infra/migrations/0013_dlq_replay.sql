-- Dead-letter queue inspect and replay (docs/decisions.md §23).
--
-- A replayed dead letter is delivered to its group again as a per-message row in state 'retry',
-- due at once, at its original partition and offset, so pulls, acks, nacks, extends, expiry and
-- dead-lettering treat it as any other redelivery. Its message is read from the topic, or from
-- the dead letter's copy once retention has dropped it. The committed offset has usually passed
-- that offset long ago, and it never moves back: lag stays what it was. qc_commit_progress now
-- looks for the lowest offset not done only from the committed offset up, so a replay below it
-- does not hold it back, and forgets only settled rows (acked or dead) below it, so the replay
-- stays until it is settled. Before replays no leased or retry row could be below it.

-- Marks the rows a replay made, so a seek or reset that drops them returns their dead letters to
-- the queue instead of losing them. A constant default: adding it rewrites nothing.
ALTER TABLE group_deliveries ADD COLUMN replay boolean NOT NULL DEFAULT false;

-- The queue a user inspects: a group's dead letters not replayed, oldest first.
CREATE INDEX dead_letters_pending_idx ON dead_letters (group_id, dead_at, partition, "offset")
    WHERE replayed_at IS NULL;

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
