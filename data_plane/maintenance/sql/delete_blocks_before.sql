WITH gone AS (
    DELETE FROM segment_blocks
    WHERE topic_id = %(topic_id)s AND partition = %(partition)s AND base_offset < %(start_offset)s
    RETURNING object_key)
SELECT object_key, count(*) AS blocks FROM gone GROUP BY object_key
