SELECT k.topic_id, k.idempotency_key, k.partition, k."offset", k.published_at
FROM idempotency_keys k
JOIN unnest(%(topic_ids)s::text[], %(keys)s::text[]) AS w(topic_id, idempotency_key)
  USING (topic_id, idempotency_key)
WHERE k.expires_at > now()
