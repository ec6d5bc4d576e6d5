-- A replayed dead letter becomes a per-message row due at once, attempt 0 (so it is delivered as
-- attempt 1, with its retries afresh), marked as a replay. A row still there for that offset is
-- its dead one; should it be in flight instead (a seek back delivered it again), it is left
-- alone: that delivery is the replay.
WITH replayed AS (
  UPDATE dead_letters SET replayed_at = now()
  WHERE group_id = %(group_id)s AND partition = %(partition)s AND "offset" = %(offset)s
    AND replayed_at IS NULL
  RETURNING partition, "offset", error
)
, requeued AS (
  INSERT INTO group_deliveries (group_id, partition, "offset", state, attempt, available_at, last_error,
                                first_delivered_at, replay)
  SELECT %(group_id)s, r.partition, r."offset", 'retry', 0, now(), r.error, now(), true FROM replayed r
  ON CONFLICT (group_id, partition, "offset") DO UPDATE
    SET state = 'retry', attempt = 0, ack_id = NULL, member_id = NULL, lease_until = NULL,
        available_at = now(), last_error = excluded.last_error, updated_at = now(), replay = true
    WHERE group_deliveries.state = 'dead'
)
SELECT partition, "offset" FROM replayed ORDER BY partition, "offset"
