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

-- qc_commit_progress: defined in data_plane/delivery/functions/qc_commit_progress.sql, applied after every migration.
