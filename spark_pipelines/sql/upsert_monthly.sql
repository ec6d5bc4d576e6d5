-- The job's per-project rows of one month, one statement per batch. An upsert: a re-run over the
-- same month (or a task Spark retries) replaces the rows it wrote before.
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
