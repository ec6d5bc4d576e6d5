-- A seek drops what is in flight on the partition; replays among it go back to the dead-letter
-- queue rather than being lost.
WITH forgotten AS (
  DELETE FROM group_deliveries WHERE group_id = %(group_id)s AND partition = %(partition)s AND state <> 'dead'
  RETURNING "offset", replay
)
UPDATE dead_letters dl SET replayed_at = NULL FROM forgotten f
WHERE dl.group_id = %(group_id)s AND dl.partition = %(partition)s AND dl."offset" = f."offset" AND f.replay
