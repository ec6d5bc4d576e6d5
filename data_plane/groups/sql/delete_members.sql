DELETE FROM group_members WHERE group_id = %(group_id)s AND id = ANY(%(member_ids)s)
