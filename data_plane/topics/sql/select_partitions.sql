SELECT partition, start_offset, next_offset FROM partitions
WHERE topic_id = %(topic_id)s ORDER BY partition
