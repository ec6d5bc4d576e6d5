DELETE FROM partitions WHERE topic_id = %(topic_id)s
