-- The lag analytics job's points of one window (lag_series, bucket %(bucket_s)s), with names.
SELECT t.organisation_id, e.project_id, e.name AS environment, t.name AS topic, g.name AS "group",
       (extract(epoch FROM s.bucket_start) * 1000)::bigint AS bucket_start_ms, s.partitions, s.lag,
       s.consume_rate, s.produce_rate, s.time_to_drain_s
FROM lag_series s
JOIN consumer_groups g ON g.id = s.group_id
JOIN topics t ON t.id = s.topic_id
JOIN environments e ON e.id = s.environment_id
WHERE s.bucket_s = %(bucket_s)s AND s.bucket_start >= %(since)s AND s.bucket_start < %(until)s
ORDER BY s.group_id, s.bucket_start
LIMIT %(limit)s
