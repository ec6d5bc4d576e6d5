"""SQL of DLQ alerts: alert endpoints, group alert state, the webhook outbox, named."""

# --- alert endpoints --------------------------------------------------------------------------

SELECT_ENDPOINT = """
SELECT environment_id, url, secret, created_at, updated_at, secret_created_at FROM alert_endpoints
WHERE environment_id = %(environment_id)s
"""

# The caller always passes a fresh secret; it is kept only on creation or when asked to rotate,
# so the row returned holds that secret exactly when it is new.
UPSERT_ENDPOINT = """
INSERT INTO alert_endpoints (environment_id, url, secret) VALUES (%(environment_id)s, %(url)s, %(secret)s)
ON CONFLICT (environment_id) DO UPDATE SET
    url = EXCLUDED.url,
    secret = CASE WHEN %(rotate)s THEN EXCLUDED.secret ELSE alert_endpoints.secret END,
    secret_created_at = CASE WHEN %(rotate)s THEN now() ELSE alert_endpoints.secret_created_at END,
    updated_at = now()
RETURNING environment_id, url, secret, created_at, updated_at, secret_created_at
"""

DELETE_ENDPOINT = """
DELETE FROM alert_endpoints WHERE environment_id = %(environment_id)s RETURNING environment_id
"""

ENDPOINT_EXISTS = """
SELECT 1 AS found FROM alert_endpoints WHERE environment_id = %(environment_id)s
"""

# --- the check ----------------------------------------------------------------------------------

# The check's work list: groups of active topics whose alert must be raised (depth reached the
# threshold, not raised) or re-armed (raised, depth below the threshold or no threshold left).
# The depth is counted up to the threshold only, so a group with a large queue costs at most
# `threshold` index entries a run, not its whole queue.
GROUPS_TO_CHECK = """
SELECT g.id FROM consumer_groups g
JOIN topics t ON t.id = g.topic_id AND t.status = 'active'
CROSS JOIN LATERAL (
  SELECT count(*) AS depth FROM (
    SELECT 1 FROM dead_letters d WHERE d.group_id = g.id AND d.replayed_at IS NULL
    LIMIT coalesce(g.alert_threshold, 0)) capped) c
WHERE (g.alert_threshold IS NOT NULL OR g.dlq_alert_raised_at IS NOT NULL)
  AND (%(group_id)s::text IS NULL OR g.id = %(group_id)s::text)
  AND ((g.dlq_alert_raised_at IS NULL AND g.alert_threshold IS NOT NULL AND c.depth >= g.alert_threshold)
       OR (g.dlq_alert_raised_at IS NOT NULL AND (g.alert_threshold IS NULL OR c.depth < g.alert_threshold)))
ORDER BY g.id
"""

# NO KEY UPDATE, as membership changes lock the group (data_plane.groups.queries.LOCK_GROUP), so
# dead-lettering and pulls (key-share locks through foreign keys) never wait for the check;
# SKIP LOCKED: a group another check or a membership change holds is left to the next run.
LOCK_ALERT_GROUP = """
SELECT g.id, g.environment_id, g.name, g.alert_threshold, g.dlq_alert_raised_at, t.name AS topic
FROM consumer_groups g JOIN topics t ON t.id = g.topic_id AND t.status = 'active'
WHERE g.id = %(group_id)s
FOR NO KEY UPDATE OF g SKIP LOCKED
"""

RAISE_ALERT = """
UPDATE consumer_groups SET dlq_alert_raised_at = now() WHERE id = %(group_id)s
"""

REARM_ALERT = """
UPDATE consumer_groups SET dlq_alert_raised_at = NULL WHERE id = %(group_id)s
"""

# --- the outbox ---------------------------------------------------------------------------------

INSERT_DELIVERY = """
INSERT INTO webhook_deliveries (id, environment_id, event, payload)
VALUES (%(id)s, %(environment_id)s, %(event)s, %(payload)s::jsonb)
"""

# Pending deliveries whose next attempt is long overdue lost their queued task; queue them again
# (and not again before another `stale_s`). Rows being sent right now are locked and skipped.
REQUEUE_STALE_DELIVERIES = """
UPDATE webhook_deliveries SET next_attempt_at = now(), updated_at = now()
WHERE id IN (
  SELECT id FROM webhook_deliveries
  WHERE status = 'pending' AND next_attempt_at < now() - make_interval(secs => %(stale_s)s)
  ORDER BY next_attempt_at LIMIT %(limit)s
  FOR UPDATE SKIP LOCKED)
RETURNING id
"""

# The row stays locked while it is sent, so two workers never send one delivery at once.
LOCK_DELIVERY = """
SELECT d.id, d.environment_id, d.event, d.payload, d.status, d.attempts, e.url, e.secret
FROM webhook_deliveries d LEFT JOIN alert_endpoints e ON e.environment_id = d.environment_id
WHERE d.id = %(id)s
FOR UPDATE OF d SKIP LOCKED
"""

RECORD_ATTEMPT = """
UPDATE webhook_deliveries SET
    attempts = attempts + 1,
    status = %(status)s,
    last_status_code = %(status_code)s,
    last_error = %(error)s,
    next_attempt_at = now() + make_interval(secs => %(retry_in_s)s),
    delivered_at = CASE WHEN %(status)s = 'delivered' THEN now() END,
    updated_at = now()
WHERE id = %(id)s
RETURNING attempts
"""
