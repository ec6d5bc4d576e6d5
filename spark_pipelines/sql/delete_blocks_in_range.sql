DELETE FROM segment_blocks
WHERE topic_id = %(topic_id)s AND partition = %(partition)s
  AND base_offset >= %(first)s AND base_offset < %(end)s
