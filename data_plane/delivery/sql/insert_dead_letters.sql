-- A partition's dead letters, with their messages' scheduling metadata (migration 0026).
INSERT INTO dead_letters (id, group_id, partition, "offset", message_key, headers, value, published_at_ms, error, attempts,
                          first_delivered_at, fairness_key, throttle_keys, weight)
SELECT v.id, %(group_id)s, %(partition)s, v."offset", v.message_key, v.headers, v.value, v.published_at_ms, v.error,
       v.attempts, v.first_delivered_at, v.fairness_key, v.throttle_keys, v.weight
FROM unnest(%(ids)s::text[], %(offsets)s::bigint[], %(keys)s::bytea[], %(headers)s::jsonb[], %(values)s::bytea[],
            %(published_at_ms)s::bigint[], %(errors)s::text[], %(attempts)s::int[], %(first_delivered_at)s::timestamptz[],
            %(fairness_keys)s::text[], %(throttle_keys)s::jsonb[], %(weights)s::int[])
  AS v(id, "offset", message_key, headers, value, published_at_ms, error, attempts, first_delivered_at,
       fairness_key, throttle_keys, weight)
ON CONFLICT (group_id, partition, "offset") DO UPDATE
  SET error = excluded.error, attempts = excluded.attempts, first_delivered_at = excluded.first_delivered_at,
      dead_at = now(), replayed_at = NULL
