-- One organisation's month per environment, with the same sums and storage rule as the monthly
-- rollup (spark_pipelines.usage_aggregation): each hour's average stored bytes, as byte-hours.
SELECT p.id AS project_id, p.name AS project_name, e.id AS environment_id, e.name AS environment_name,
       sum(u.messages_in)::bigint AS messages_in, sum(u.messages_out)::bigint AS messages_out,
       sum(u.bytes_in)::bigint AS bytes_in, sum(u.bytes_out)::bigint AS bytes_out,
       sum(u.publish_requests + u.consume_requests + u.admin_requests)::bigint AS requests,
       coalesce(sum(u.storage_bytes_sum::float8 / nullif(u.storage_samples, 0)), 0) AS storage_byte_hours
FROM usage_hourly u
JOIN environments e ON e.id = u.environment_id
JOIN projects p ON p.id = e.project_id
WHERE e.organisation_id = %(organisation_id)s AND u.hour >= %(since)s AND u.hour < %(until)s
GROUP BY p.id, p.name, e.id, e.name
HAVING sum(u.messages_in + u.messages_out + u.bytes_in + u.bytes_out + u.publish_requests
           + u.consume_requests + u.admin_requests + u.storage_bytes_sum) > 0
ORDER BY p.name, e.name
