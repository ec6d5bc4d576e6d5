SELECT dead_at, replayed_at FROM dead_letters
WHERE group_id = %(group_id)s AND partition = %(partition)s AND "offset" = %(offset)s
