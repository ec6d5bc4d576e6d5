SELECT id, client_id, generation, session_timeout_ms, joined_at, last_heartbeat_at FROM group_members
WHERE group_id = %(group_id)s ORDER BY id
