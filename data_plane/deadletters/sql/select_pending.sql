-- The queue's entries after a cursor entry, oldest first (dead_letters_pending_idx).
SELECT partition, "offset", message_key, headers, value, published_at_ms, error, attempts,
       first_delivered_at, dead_at, fairness_key, throttle_keys
FROM dead_letters
WHERE group_id = %(group_id)s AND replayed_at IS NULL
  AND (dead_at, partition, "offset") > (%(after_dead_at)s::timestamptz, %(after_partition)s::int, %(after_offset)s::bigint)
ORDER BY dead_at, partition, "offset"
LIMIT %(limit)s
