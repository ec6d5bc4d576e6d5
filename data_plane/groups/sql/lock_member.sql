SELECT id FROM group_members WHERE id = %(id)s AND group_id = %(group_id)s FOR UPDATE
