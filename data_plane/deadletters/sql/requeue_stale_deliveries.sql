-- Pending deliveries whose next attempt is long overdue lost their queued task; queue them again
-- (and not again before another `stale_s`). Rows being sent right now are locked and skipped.
UPDATE webhook_deliveries SET next_attempt_at = now(), updated_at = now()
WHERE id IN (
  SELECT id FROM webhook_deliveries
  WHERE status = 'pending' AND next_attempt_at < now() - make_interval(secs => %(stale_s)s)
  ORDER BY next_attempt_at LIMIT %(limit)s
  FOR UPDATE SKIP LOCKED)
RETURNING id
