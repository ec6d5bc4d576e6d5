-- NO KEY UPDATE, not UPDATE: membership changes serialise on the group row, but pulls that insert
-- leases (whose foreign key takes KEY SHARE on this row) must not wait for them — with FOR UPDATE a
-- join waiting for partition rows held by a pull, and that pull waiting for this row, deadlocked.
SELECT * FROM consumer_groups WHERE topic_id = %(topic_id)s AND name = %(name)s
FOR NO KEY UPDATE
