SELECT partition, committed_offset, delivered_offset FROM group_partitions
WHERE group_id = %(group_id)s AND partition = %(partition)s FOR UPDATE
