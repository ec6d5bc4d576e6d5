-- One failed push, and the group's older failures past the newest %(keep)s forgotten.
WITH added AS (
    INSERT INTO push_failures (group_id, message_id, attempt, status_code, error, dead_lettered)
    VALUES (%(group_id)s, %(message_id)s, %(attempt)s, %(status_code)s, %(error)s, %(dead_lettered)s)
    RETURNING id
)
DELETE FROM push_failures
WHERE group_id = %(group_id)s
  AND id < (SELECT id FROM push_failures WHERE group_id = %(group_id)s ORDER BY id DESC OFFSET %(keep)s LIMIT 1)
