SELECT count(*) AS members FROM group_members WHERE group_id = %(group_id)s AND NOT pusher
