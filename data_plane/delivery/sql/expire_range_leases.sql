-- A pull's own range leases whose messages it could not read, ended now so that the next pull
-- of their partitions redelivers them. Partitions first, in partition order, as pulls and acks
-- lock them.
WITH locked AS (
  SELECT partition FROM group_partitions
  WHERE group_id = %(group_id)s AND partition = ANY(%(partitions)s) ORDER BY partition FOR UPDATE
)
UPDATE group_leases SET lease_until = now()
WHERE group_id = %(group_id)s AND lease_id = ANY(%(lease_ids)s) AND lease_until > now()
  AND partition IN (SELECT partition FROM locked)
