INSERT INTO group_hooks (group_id, on_failure) VALUES (%(group_id)s, %(source)s)
ON CONFLICT (group_id) DO UPDATE SET on_failure = excluded.on_failure, updated_at = now()
