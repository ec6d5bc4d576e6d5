-- The partition's sequencer row, locked the way the writer (qc_commit_flush) and retention lock
-- it. One partition per swap transaction, so there is no multi-row lock order to get wrong.
SELECT p.next_offset FROM partitions p
JOIN topics t ON t.id = p.topic_id AND t.status = 'active'
WHERE p.topic_id = %(topic_id)s AND p.partition = %(partition)s
FOR UPDATE OF p
