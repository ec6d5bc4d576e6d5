-- Everything one API process counted since its last flush, in one statement. Additive: each
-- process adds its own counts, so two processes (or two flushes) never overwrite each other.
-- Rows go in key order, so two processes flushing at once lock shared rows in the same order
-- (no deadlock). An environment deleted since it was counted is skipped by the join instead of
-- failing the flush on the foreign key.
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
