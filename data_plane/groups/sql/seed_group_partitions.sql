-- The group's first partitions start where startFrom says; partitions its topic gains later
-- start at their beginning: every message in them was published after the group existed, so
-- "latest" there would silently skip whatever arrived before the group noticed them. (The
-- EXISTS sees the group's rows as they were before this statement.)
INSERT INTO group_partitions (group_id, partition, committed_offset, delivered_offset)
SELECT %(group_id)s, p.partition, s.start, s.start
FROM partitions p
CROSS JOIN LATERAL (
  SELECT CASE
    WHEN %(start_from)s = 'earliest'
      OR EXISTS (SELECT 1 FROM group_partitions x WHERE x.group_id = %(group_id)s)
    THEN p.start_offset ELSE p.next_offset END AS start) s
WHERE p.topic_id = %(topic_id)s
ON CONFLICT (group_id, partition) DO NOTHING
