SELECT g.*, t.delivery FROM consumer_groups g JOIN topics t ON t.id = g.topic_id
WHERE g.topic_id = %(topic_id)s AND g.name = %(name)s
