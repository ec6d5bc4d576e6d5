DELETE FROM idempotency_keys WHERE topic_id = %(topic_id)s
