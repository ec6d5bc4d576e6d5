SELECT idempotency_key, partition, "offset", published_at FROM idempotency_keys
WHERE topic_id = %(topic_id)s AND idempotency_key = ANY(%(keys)s::text[]) AND expires_at > now()
