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

-- qc_commit_progress: defined in data_plane/delivery/functions/qc_commit_progress.sql, applied after every migration.
