UPDATE partitions SET start_offset = GREATEST(start_offset, %(start_offset)s)
WHERE topic_id = %(topic_id)s AND partition = %(partition)s
