-- A repeated ack is answered "acked" (docs/decisions.md §20). qc_commit_progress deletes a range
-- lease, or a per-message row, once the committed offset has passed it, so an ack sent again
-- after a lost response found nothing and was refused as unknown: on an exactly-once topic that
-- tells the client its work may be repeated, which is false. Before deleting them the function
-- now keeps a tombstone of what was acked through each of them: the lease id (or per-message
-- ackId) and its acked bits. No hot statement reads this table (only an ack whose lease is gone
-- does), and a beat task deletes tombstones older than ten minutes, so the hot path pays one
-- small append per settled lease. (§19: keeping the settled leases themselves in group_leases
-- made every ack slower as they piled up.)
--
-- qc_commit_progress is also rewritten in PL/pgSQL with a generic plan forced. Its statement was
-- planned afresh on every call (a custom plan each time), which cost ~0.6 ms of its ~0.75 ms
-- (pg_stat_statements over 60-120 s soaks). The generic plan looks the rows up by the same
-- indexes. PL/pgSQL keeps the plan on PostgreSQL 15-17 too, where SQL functions do not.

-- No foreign key to consumer_groups: its check takes a key-share lock on the group row in every
-- ack that forgets a lease (~0.14 ms a call in the soaks). A deleted group's tombstones go with
-- the purge; a group made again under the same name has a new id.
CREATE TABLE settled_acks (
    group_id   text        NOT NULL,
    -- A range lease's id (16 characters), or a per-message row's ackId.
    ack_key    text        NOT NULL,
    -- Bit i (from the left): offset first_offset + i of the range was acked through it. A
    -- per-message row's tombstone is B'1' (only acked rows get one).
    acked      varbit      NOT NULL,
    settled_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, ack_key)
);
-- Rows arrive in settled_at order, so a BRIN index serves the purge at almost no insert cost.
CREATE INDEX settled_acks_age_idx ON settled_acks USING brin (settled_at);

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
        WHERE d.group_id = gp.group_id AND d.partition = gp.partition AND d.state IN ('leased', 'retry')),
      (SELECT min(l.first_offset + position(B'0' IN l.done) - 1) FROM group_leases l
        WHERE l.group_id = gp.group_id AND l.partition = gp.partition AND l.open_count > 0),
      gp.delivered_offset))
  WHERE gp.group_id = p_group_id AND gp.partition = ANY(p_partitions)
  RETURNING gp.partition, gp.committed_offset
), forgotten_rows AS (
  DELETE FROM group_deliveries d USING moved
  WHERE d.group_id = p_group_id AND d.partition = moved.partition AND d."offset" < moved.committed_offset
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
