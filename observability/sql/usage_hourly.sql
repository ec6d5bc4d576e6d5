-- usage_hourly from %(since)s on (the hour just ended and the current one), with the tenant's
-- names; the storage columns as the hour's average so far (NULL before the first sample).
SELECT e.organisation_id, e.project_id, e.name AS environment,
       (extract(epoch FROM u.hour) * 1000)::bigint AS hour_ms,
       u.messages_in, u.bytes_in, u.messages_out, u.bytes_out,
       u.publish_requests, u.consume_requests, u.admin_requests,
       CASE WHEN u.storage_samples > 0 THEN u.storage_bytes_sum / u.storage_samples END
           AS storage_bytes_avg
FROM usage_hourly u
JOIN environments e ON e.id = u.environment_id
WHERE u.hour >= %(since)s
ORDER BY u.environment_id, u.hour
LIMIT %(limit)s
