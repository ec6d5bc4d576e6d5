-- One time slice of the job's input. Times as epoch seconds: Spark gets plain numbers and no
-- time zone can creep in between PostgreSQL, Python and the JVM.
SELECT group_id, environment_id, topic_id, partition, extract(epoch FROM taken_at)::bigint AS taken_at_s,
       committed_offset, high_watermark, lag
FROM lag_snapshots
WHERE taken_at >= to_timestamp(%(from_s)s) AND taken_at < to_timestamp(%(until_s)s)
