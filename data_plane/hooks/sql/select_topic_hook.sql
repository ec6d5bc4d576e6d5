SELECT on_enqueue FROM topic_hooks WHERE topic_id = %(topic_id)s
