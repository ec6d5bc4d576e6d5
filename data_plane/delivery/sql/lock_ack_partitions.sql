-- The partitions of these leases and per-message ack ids, locked in partition order (as pulls do).
SELECT partition FROM group_partitions
WHERE group_id = %(group_id)s AND partition IN (
    SELECT l.partition FROM group_leases l WHERE l.group_id = %(group_id)s AND l.lease_id = ANY(%(lease_ids)s)
    UNION
    SELECT d.partition FROM group_deliveries d WHERE d.group_id = %(group_id)s AND d.ack_id = ANY(%(ack_ids)s))
ORDER BY partition FOR UPDATE
