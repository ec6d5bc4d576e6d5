-- One sample of every environment's stored bytes (the index's block lengths of its active
-- topics) into the hour of the slot ``%(slot)s``. Environments that stored something earlier in
-- the hour and nothing now get a 0 sample, so the hour's average drops with them. At most one
-- sample per slot: a repeated run in the same slot updates nothing (the WHERE of the update).
WITH stored AS (
    SELECT t.environment_id, sum(b.byte_length)::bigint AS bytes
    FROM topics t
    JOIN segment_blocks b ON b.topic_id = t.id
    WHERE t.status = 'active' AND (%(environment_id)s::text IS NULL OR t.environment_id = %(environment_id)s::text)
    GROUP BY t.environment_id
), emptied AS (
    SELECT u.environment_id, 0::bigint AS bytes
    FROM usage_hourly u
    WHERE u.hour = date_trunc('hour', %(slot)s::timestamptz, 'UTC') AND u.storage_samples > 0
      AND (%(environment_id)s::text IS NULL OR u.environment_id = %(environment_id)s::text)
      AND u.environment_id NOT IN (SELECT environment_id FROM stored)
)
INSERT INTO usage_hourly AS u (environment_id, hour, storage_bytes_sum, storage_bytes_max, storage_samples,
                               storage_sampled_at)
SELECT s.environment_id, date_trunc('hour', %(slot)s::timestamptz, 'UTC'), s.bytes, s.bytes, 1, %(slot)s
FROM (SELECT * FROM stored UNION ALL SELECT * FROM emptied) s
ORDER BY s.environment_id
ON CONFLICT (environment_id, hour) DO UPDATE
  SET storage_bytes_sum = u.storage_bytes_sum + excluded.storage_bytes_sum,
      storage_bytes_max = greatest(u.storage_bytes_max, excluded.storage_bytes_max),
      storage_samples = u.storage_samples + 1, storage_sampled_at = excluded.storage_sampled_at,
      updated_at = now()
  WHERE u.storage_sampled_at IS NULL OR u.storage_sampled_at < excluded.storage_sampled_at
