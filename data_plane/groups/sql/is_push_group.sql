SELECT 1 FROM group_push WHERE group_id = %(group_id)s
