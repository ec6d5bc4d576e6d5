-- Before members are removed and their leases ended: every partition row of the group, in
-- partition order, as pulls and acks lock them. Removing a member writes the rows it owns
-- (owner_member_id SET NULL) and ending its leases writes lease rows that an ack in flight
-- may need next; taking the partitions first, in order, means neither can close a cycle.
SELECT partition FROM group_partitions WHERE group_id = %(group_id)s ORDER BY partition FOR UPDATE
