SELECT id, name, partitions, delivery FROM topics WHERE id = %(id)s AND status = 'active'
