-- The leader's SyncGroup: each member's assignment for the generation.
UPDATE kafka_group_members m SET assignment = a.assignment, last_heartbeat_at = now()
FROM unnest(%(member_ids)s::text[], %(assignments)s::bytea[]) AS a(member_id, assignment)
WHERE m.group_id = %(group_id)s AND m.member_id = a.member_id
