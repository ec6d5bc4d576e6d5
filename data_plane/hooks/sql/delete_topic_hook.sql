DELETE FROM topic_hooks WHERE topic_id = %(topic_id)s
