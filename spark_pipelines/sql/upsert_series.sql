-- The job's points, one statement per batch. An upsert: a re-run over the same window (or a task
-- Spark retries) replaces the rows it wrote before rather than adding more.
INSERT INTO lag_series (group_id, bucket_s, bucket_start, environment_id, topic_id, partitions, lag, consume_rate,
                        produce_rate, time_to_drain_s)
SELECT v.group_id, %(bucket_s)s, to_timestamp(v.bucket_start_s), v.environment_id, v.topic_id, v.partitions, v.lag,
       v.consume_rate, v.produce_rate, v.time_to_drain_s
FROM unnest(%(group_ids)s::text[], %(bucket_starts_s)s::bigint[], %(environment_ids)s::text[], %(topic_ids)s::text[],
            %(partitions)s::int[], %(lags)s::bigint[], %(consume_rates)s::float8[], %(produce_rates)s::float8[],
            %(drain_s)s::float8[])
  AS v(group_id, bucket_start_s, environment_id, topic_id, partitions, lag, consume_rate, produce_rate,
       time_to_drain_s)
ON CONFLICT (group_id, bucket_s, bucket_start) DO UPDATE
  SET environment_id = excluded.environment_id, topic_id = excluded.topic_id, partitions = excluded.partitions,
      lag = excluded.lag, consume_rate = excluded.consume_rate, produce_rate = excluded.produce_rate,
      time_to_drain_s = excluded.time_to_drain_s, computed_at = now()
