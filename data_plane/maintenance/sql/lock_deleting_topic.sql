SELECT id FROM topics WHERE id = %(topic_id)s AND status = 'deleting' FOR UPDATE
