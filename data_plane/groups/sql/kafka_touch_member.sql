-- A heartbeat (or any request of the member): it is alive.
UPDATE kafka_group_members SET last_heartbeat_at = now()
WHERE group_id = %(group_id)s AND member_id = %(member_id)s
