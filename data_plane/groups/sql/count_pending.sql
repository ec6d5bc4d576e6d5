SELECT count(*) AS depth FROM dead_letters WHERE group_id = %(group_id)s AND replayed_at IS NULL
