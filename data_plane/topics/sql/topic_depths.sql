-- Retained messages per active topic of an environment (as TOPIC_STATS counts depth).
SELECT t.id, coalesce(sum(p.next_offset - p.start_offset), 0) AS depth
FROM topics t LEFT JOIN partitions p ON p.topic_id = t.id
WHERE t.environment_id = %(environment_id)s AND t.status = 'active'
GROUP BY t.id
