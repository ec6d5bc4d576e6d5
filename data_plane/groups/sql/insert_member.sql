INSERT INTO group_members (id, group_id, client_id, session_timeout_ms, generation)
VALUES (%(id)s, %(group_id)s, %(client_id)s, %(session_timeout_ms)s, %(generation)s)
