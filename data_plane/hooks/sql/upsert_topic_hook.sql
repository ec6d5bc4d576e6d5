INSERT INTO topic_hooks (topic_id, on_enqueue) VALUES (%(topic_id)s, %(source)s)
ON CONFLICT (topic_id) DO UPDATE SET on_enqueue = excluded.on_enqueue, updated_at = now()
