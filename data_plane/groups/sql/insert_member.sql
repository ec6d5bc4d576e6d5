INSERT INTO group_members (id, group_id, client_id, session_timeout_ms, generation, max_in_flight)
VALUES (%(id)s, %(group_id)s, %(client_id)s, %(session_timeout_ms)s, %(generation)s, %(max_in_flight)s)
