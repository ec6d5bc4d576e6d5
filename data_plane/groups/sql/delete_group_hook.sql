DELETE FROM group_hooks WHERE group_id = %(group_id)s
