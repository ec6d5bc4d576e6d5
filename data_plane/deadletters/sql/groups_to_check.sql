-- The check's work list: groups of active topics whose alert must be raised (depth reached the
-- threshold, not raised) or re-armed (raised, depth below the threshold or no threshold left).
-- The depth is counted up to the threshold only, so a group with a large queue costs at most
-- `threshold` index entries a run, not its whole queue.
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
