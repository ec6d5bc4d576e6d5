"""SQL of consumer lag snapshots and the lag series (migration 0015), named.

Used by :mod:`data_plane.groups.lag` (snapshots, purge, the API's reads) and by the Spark job
:mod:`spark_pipelines.lag_analytics` (its window read and its upsert), so every statement on
these tables lives here.
"""

# Every group of every active topic (of one topic, when given) in one statement: the snapshot of
# the minute ``at`` (now, by default). A second run in the same minute inserts nothing. Plain
# reads of group_partitions and partitions: no row locks, so pulls, acks and flushes never wait.
# Lag as the API reports it (LIST_GROUPS, describe): high watermark - committed offset, never < 0.
INSERT_SNAPSHOTS = """
INSERT INTO lag_snapshots (group_id, taken_at, partition, environment_id, topic_id, committed_offset, high_watermark,
                           lag)
SELECT g.id, date_trunc('minute', coalesce(%(at)s::timestamptz, now())), gp.partition, g.environment_id, g.topic_id,
       gp.committed_offset, p.next_offset, greatest(p.next_offset - gp.committed_offset, 0)
FROM consumer_groups g
JOIN topics t ON t.id = g.topic_id AND t.status = 'active'
JOIN group_partitions gp ON gp.group_id = g.id
JOIN partitions p ON p.topic_id = g.topic_id AND p.partition = gp.partition
WHERE (%(topic_id)s::text IS NULL OR g.topic_id = %(topic_id)s::text)
ON CONFLICT (group_id, taken_at, partition) DO NOTHING
"""

# In batches, each its own transaction on an autocommit connection (as PURGE_SETTLED_ACKS).
PURGE_SNAPSHOTS = """
DELETE FROM lag_snapshots WHERE ctid IN (
    SELECT ctid FROM lag_snapshots WHERE taken_at < now() - make_interval(secs => %(keep_s)s)
    LIMIT %(batch)s)
"""

PURGE_SERIES = """
DELETE FROM lag_series WHERE ctid IN (
    SELECT ctid FROM lag_series WHERE bucket_start < now() - make_interval(secs => %(keep_s)s)
    LIMIT %(batch)s)
"""

SELECT_SERIES = """
SELECT bucket_start, lag, consume_rate, produce_rate, time_to_drain_s FROM lag_series
WHERE group_id = %(group_id)s AND bucket_s = %(bucket_s)s
  AND bucket_start >= %(since)s AND bucket_start < %(until)s
ORDER BY bucket_start
"""

# --- the Spark job ---------------------------------------------------------------------------

# Whether a window has any snapshot: the scheduled run starts no JVM for an empty window.
ANY_SNAPSHOTS = """
SELECT EXISTS (SELECT 1 FROM lag_snapshots WHERE taken_at >= %(since)s AND taken_at < %(until)s) AS found
"""

# One time slice of the job's input. Times as epoch seconds: Spark gets plain numbers and no
# time zone can creep in between PostgreSQL, Python and the JVM.
SELECT_SNAPSHOT_SLICE = """
SELECT group_id, environment_id, topic_id, partition, extract(epoch FROM taken_at)::bigint AS taken_at_s,
       committed_offset, high_watermark, lag
FROM lag_snapshots
WHERE taken_at >= to_timestamp(%(from_s)s) AND taken_at < to_timestamp(%(until_s)s)
"""

# The job's points, one statement per batch. An upsert: a re-run over the same window (or a task
# Spark retries) replaces the rows it wrote before rather than adding more.
UPSERT_SERIES = """
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
"""
