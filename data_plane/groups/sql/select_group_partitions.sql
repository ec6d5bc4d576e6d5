SELECT gp.partition, gp.owner_member_id, gp.committed_offset, p.next_offset, p.start_offset
FROM group_partitions gp JOIN partitions p ON p.topic_id = %(topic_id)s AND p.partition = gp.partition
WHERE gp.group_id = %(group_id)s ORDER BY gp.partition
