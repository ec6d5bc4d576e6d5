-- The row stays locked while it is sent, so two workers never send one delivery at once.
SELECT d.id, d.environment_id, d.event, d.payload, d.status, d.attempts, e.url, e.secret
FROM webhook_deliveries d LEFT JOIN alert_endpoints e ON e.environment_id = d.environment_id
WHERE d.id = %(id)s
FOR UPDATE OF d SKIP LOCKED
