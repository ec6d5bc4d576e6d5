SELECT count(*) AS n FROM group_members WHERE group_id = %(group_id)s
