DELETE FROM group_leases WHERE group_id = %(group_id)s AND partition = %(partition)s
