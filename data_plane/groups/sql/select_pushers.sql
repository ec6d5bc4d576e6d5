SELECT id FROM group_members WHERE group_id = %(group_id)s AND pusher ORDER BY id
