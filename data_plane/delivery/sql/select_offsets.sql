SELECT gp.partition, gp.committed_offset, p.next_offset, p.start_offset
FROM group_partitions gp JOIN partitions p ON p.topic_id = %(topic_id)s AND p.partition = gp.partition
WHERE gp.group_id = %(group_id)s AND (%(partition)s::int IS NULL OR gp.partition = %(partition)s::int)
ORDER BY gp.partition
