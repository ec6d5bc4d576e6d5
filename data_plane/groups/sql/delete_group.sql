DELETE FROM consumer_groups WHERE topic_id = %(topic_id)s AND name = %(name)s RETURNING id
