SELECT id, name, partitions, delivery FROM topics
WHERE environment_id = %(environment_id)s AND name = %(name)s AND status = 'active'
