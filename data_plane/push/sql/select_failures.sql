SELECT message_id, attempt, status_code, error, dead_lettered, failed_at FROM push_failures
WHERE group_id = %(group_id)s ORDER BY id DESC LIMIT %(limit)s
