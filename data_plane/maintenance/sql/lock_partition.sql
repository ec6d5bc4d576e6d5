SELECT start_offset, next_offset FROM partitions
WHERE topic_id = %(topic_id)s AND partition = %(partition)s FOR UPDATE
