INSERT INTO consumer_groups (id, environment_id, topic_id, name) VALUES (%(id)s, %(environment_id)s, %(topic_id)s, %(name)s)
ON CONFLICT (topic_id, name) DO NOTHING
