SELECT id, name, partitions FROM topics
WHERE environment_id = %(environment_id)s AND name = %(name)s AND status = 'active'
