"""SQL of usage metering and its rollup (migration 0016), named.

Used by :mod:`billing.meter` (the API processes' flush), :mod:`billing.usage` (the storage
sampler and ``GET /v1/usage``) and the Spark job :mod:`spark_pipelines.usage_aggregation` (its
month read and its upsert), so every statement on these tables lives here.
"""

# --- the meter's flush -------------------------------------------------------------------------

# Everything one API process counted since its last flush, in one statement. Additive: each
# process adds its own counts, so two processes (or two flushes) never overwrite each other.
# Rows go in key order, so two processes flushing at once lock shared rows in the same order
# (no deadlock). An environment deleted since it was counted is skipped by the join instead of
# failing the flush on the foreign key.
UPSERT_HOURLY = """
INSERT INTO usage_hourly AS u (environment_id, hour, messages_in, bytes_in, messages_out, bytes_out,
                               publish_requests, consume_requests, admin_requests)
SELECT v.environment_id, to_timestamp(v.hour_s), v.messages_in, v.bytes_in, v.messages_out, v.bytes_out,
       v.publish_requests, v.consume_requests, v.admin_requests
FROM unnest(%(environment_ids)s::text[], %(hours_s)s::bigint[], %(messages_in)s::bigint[], %(bytes_in)s::bigint[],
            %(messages_out)s::bigint[], %(bytes_out)s::bigint[], %(publish_requests)s::bigint[],
            %(consume_requests)s::bigint[], %(admin_requests)s::bigint[])
  AS v(environment_id, hour_s, messages_in, bytes_in, messages_out, bytes_out, publish_requests, consume_requests,
       admin_requests)
JOIN environments e ON e.id = v.environment_id
ORDER BY v.environment_id, v.hour_s
ON CONFLICT (environment_id, hour) DO UPDATE
  SET messages_in = u.messages_in + excluded.messages_in, bytes_in = u.bytes_in + excluded.bytes_in,
      messages_out = u.messages_out + excluded.messages_out, bytes_out = u.bytes_out + excluded.bytes_out,
      publish_requests = u.publish_requests + excluded.publish_requests,
      consume_requests = u.consume_requests + excluded.consume_requests,
      admin_requests = u.admin_requests + excluded.admin_requests, updated_at = now()
"""

# --- the storage sampler -----------------------------------------------------------------------

# One sample of every environment's stored bytes (the index's block lengths of its active
# topics) into the hour of the slot ``%(slot)s``. Environments that stored something earlier in
# the hour and nothing now get a 0 sample, so the hour's average drops with them. At most one
# sample per slot: a repeated run in the same slot updates nothing (the WHERE of the update).
SAMPLE_STORAGE = """
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
"""

# --- GET /v1/usage -----------------------------------------------------------------------------

# One environment's rows in ``[from, to)``, summed per UTC hour or day. ``storage_byte_hours``
# adds each hour's average stored bytes (an hour without samples adds nothing).
SELECT_BUCKETS = """
SELECT date_trunc(%(unit)s, hour, 'UTC') AS start,
       sum(messages_in)::bigint AS messages_in, sum(bytes_in)::bigint AS bytes_in,
       sum(messages_out)::bigint AS messages_out, sum(bytes_out)::bigint AS bytes_out,
       sum(publish_requests)::bigint AS publish_requests, sum(consume_requests)::bigint AS consume_requests,
       sum(admin_requests)::bigint AS admin_requests,
       coalesce(sum(storage_bytes_sum::float8 / nullif(storage_samples, 0)), 0) AS storage_byte_hours,
       max(storage_bytes_max)::bigint AS storage_bytes_max
FROM usage_hourly
WHERE environment_id = %(environment_id)s AND hour >= %(from)s AND hour < %(to)s
GROUP BY 1
ORDER BY 1
"""

# --- the Spark job -----------------------------------------------------------------------------

# Whether a month has any usage: the scheduled run starts no JVM for an empty month.
ANY_HOURLY = """
SELECT EXISTS (SELECT 1 FROM usage_hourly WHERE hour >= %(since)s AND hour < %(until)s) AS found
"""

# One time slice of the job's input, with the project and organisation each row is billed to.
# Times as epoch seconds (as the lag job's): no time zone between PostgreSQL, Python and the JVM.
SELECT_HOURLY_SLICE = """
SELECT e.organisation_id, e.project_id, o.tier, extract(epoch FROM u.hour)::bigint AS hour_s,
       u.messages_in, u.bytes_in, u.messages_out, u.bytes_out, u.publish_requests, u.consume_requests,
       u.admin_requests, coalesce(u.storage_bytes_sum::float8 / nullif(u.storage_samples, 0), 0) AS storage_bytes
FROM usage_hourly u
JOIN environments e ON e.id = u.environment_id
JOIN organisations o ON o.id = e.organisation_id
WHERE u.hour >= to_timestamp(%(from_s)s) AND u.hour < to_timestamp(%(until_s)s)
"""

# The job's per-project rows of one month, one statement per batch. An upsert: a re-run over the
# same month (or a task Spark retries) replaces the rows it wrote before.
UPSERT_MONTHLY = """
INSERT INTO usage_monthly (project_id, month, organisation_id, tier, messages_in, messages_out, bytes_in, bytes_out,
                           publish_requests, consume_requests, admin_requests, storage_byte_hours,
                           messages_in_millions, messages_out_millions, gb_in, gb_out, storage_gb_months, requests,
                           estimated_amount_cents)
SELECT v.project_id, %(month)s::date, v.organisation_id, v.tier, v.messages_in, v.messages_out, v.bytes_in,
       v.bytes_out, v.publish_requests, v.consume_requests, v.admin_requests, v.storage_byte_hours,
       v.messages_in_millions, v.messages_out_millions, v.gb_in, v.gb_out, v.storage_gb_months, v.requests,
       v.estimated_amount_cents
FROM unnest(%(project_ids)s::text[], %(organisation_ids)s::text[], %(tiers)s::text[], %(messages_in)s::bigint[],
            %(messages_out)s::bigint[], %(bytes_in)s::bigint[], %(bytes_out)s::bigint[],
            %(publish_requests)s::bigint[], %(consume_requests)s::bigint[], %(admin_requests)s::bigint[],
            %(storage_byte_hours)s::float8[], %(messages_in_millions)s::float8[],
            %(messages_out_millions)s::float8[], %(gb_in)s::float8[], %(gb_out)s::float8[],
            %(storage_gb_months)s::float8[], %(requests)s::bigint[], %(estimated_amount_cents)s::bigint[])
  AS v(project_id, organisation_id, tier, messages_in, messages_out, bytes_in, bytes_out, publish_requests,
       consume_requests, admin_requests, storage_byte_hours, messages_in_millions, messages_out_millions, gb_in,
       gb_out, storage_gb_months, requests, estimated_amount_cents)
JOIN projects p ON p.id = v.project_id
ORDER BY v.project_id
ON CONFLICT (project_id, month) DO UPDATE
  SET organisation_id = excluded.organisation_id, tier = excluded.tier, messages_in = excluded.messages_in,
      messages_out = excluded.messages_out, bytes_in = excluded.bytes_in, bytes_out = excluded.bytes_out,
      publish_requests = excluded.publish_requests, consume_requests = excluded.consume_requests,
      admin_requests = excluded.admin_requests, storage_byte_hours = excluded.storage_byte_hours,
      messages_in_millions = excluded.messages_in_millions, messages_out_millions = excluded.messages_out_millions,
      gb_in = excluded.gb_in, gb_out = excluded.gb_out, storage_gb_months = excluded.storage_gb_months,
      requests = excluded.requests, estimated_amount_cents = excluded.estimated_amount_cents, computed_at = now()
"""
