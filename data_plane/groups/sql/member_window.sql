-- The member's effective window: the smaller of the group's maxInFlight and its own.
SELECT least(g.max_in_flight, coalesce(m.max_in_flight, g.max_in_flight)) AS window
FROM group_members m JOIN consumer_groups g ON g.id = m.group_id
WHERE m.id = %(id)s AND m.group_id = %(group_id)s
