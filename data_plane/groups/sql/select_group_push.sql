SELECT endpoint, max_in_flight, timeout_ms, ordered, secret_hint, secret_created_at FROM group_push
WHERE group_id = %(group_id)s
