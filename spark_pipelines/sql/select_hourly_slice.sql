-- One time slice of the job's input, with the project and organisation each row is billed to.
-- Times as epoch seconds (as the lag job's): no time zone between PostgreSQL, Python and the JVM.
SELECT e.organisation_id, e.project_id, o.tier, extract(epoch FROM u.hour)::bigint AS hour_s,
       u.messages_in, u.bytes_in, u.messages_out, u.bytes_out, u.publish_requests, u.consume_requests,
       u.admin_requests, coalesce(u.storage_bytes_sum::float8 / nullif(u.storage_samples, 0), 0) AS storage_bytes
FROM usage_hourly u
JOIN environments e ON e.id = u.environment_id
JOIN organisations o ON o.id = e.organisation_id
WHERE u.hour >= to_timestamp(%(from_s)s) AND u.hour < to_timestamp(%(until_s)s)
