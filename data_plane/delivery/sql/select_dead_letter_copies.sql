-- The dead-letter copies of these offsets: a replayed message retention has dropped since is
-- delivered from its copy (migration 0013). A message never changes, so any copy is the message.
SELECT "offset", message_key, headers, value, published_at_ms, fairness_key, throttle_keys, weight
FROM dead_letters
WHERE group_id = %(group_id)s AND partition = %(partition)s AND "offset" = ANY(%(offsets)s)
