-- Every member joined (or the deadline passed and the others were dropped): a new generation,
-- answered to each member's JoinGroup. The assignments come with the leader's SyncGroup.
WITH joined AS (
    UPDATE kafka_group_members
    SET join_generation = %(generation)s, assignment = NULL, last_heartbeat_at = now()
    WHERE group_id = %(group_id)s AND joined
)
UPDATE kafka_groups
SET state = %(state)s, generation = %(generation)s, protocol_type = %(protocol_type)s,
    protocol_name = %(protocol_name)s, leader_id = %(leader_id)s, rebalance_deadline = NULL,
    updated_at = now()
WHERE id = %(group_id)s
