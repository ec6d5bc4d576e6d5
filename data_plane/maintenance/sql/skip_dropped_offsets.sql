-- Consumer groups that had not yet delivered the dropped offsets skip them: nothing is left to
-- deliver there. Their committed offsets then follow (COMMIT_PROGRESS). Runs under the partition
-- row lock; group partition rows are locked after it, and nothing locks the two the other way.
UPDATE group_partitions gp SET delivered_offset = %(start_offset)s
FROM consumer_groups g
WHERE g.topic_id = %(topic_id)s AND gp.group_id = g.id AND gp.partition = %(partition)s
  AND gp.delivered_offset < %(start_offset)s
RETURNING gp.group_id
