DELETE FROM group_push WHERE group_id = %(group_id)s RETURNING group_id
