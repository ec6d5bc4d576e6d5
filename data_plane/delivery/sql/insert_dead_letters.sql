INSERT INTO dead_letters (id, group_id, partition, "offset", message_key, headers, value, published_at_ms, error, attempts,
                          first_delivered_at)
SELECT v.id, %(group_id)s, %(partition)s, v."offset", v.message_key, v.headers, v.value, v.published_at_ms, v.error,
       v.attempts, v.first_delivered_at
FROM unnest(%(ids)s::text[], %(offsets)s::bigint[], %(keys)s::bytea[], %(headers)s::jsonb[], %(values)s::bytea[],
            %(published_at_ms)s::bigint[], %(errors)s::text[], %(attempts)s::int[], %(first_delivered_at)s::timestamptz[])
  AS v(id, "offset", message_key, headers, value, published_at_ms, error, attempts, first_delivered_at)
ON CONFLICT (group_id, partition, "offset") DO UPDATE
  SET error = excluded.error, attempts = excluded.attempts, first_delivered_at = excluded.first_delivered_at,
      dead_at = now(), replayed_at = NULL
