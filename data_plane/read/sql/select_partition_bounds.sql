SELECT t.status, p.start_offset, p.next_offset
FROM partitions p JOIN topics t ON t.id = p.topic_id
WHERE p.topic_id = %(topic_id)s AND p.partition = %(partition)s
