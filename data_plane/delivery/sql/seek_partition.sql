UPDATE group_partitions SET committed_offset = %(offset)s, delivered_offset = %(offset)s
WHERE group_id = %(group_id)s AND partition = %(partition)s
