-- A member's own window (NULL: the group's maxInFlight); returns the member's effective window.
UPDATE group_members m SET max_in_flight = %(max_in_flight)s
FROM consumer_groups g
WHERE m.id = %(id)s AND m.group_id = %(group_id)s AND g.id = m.group_id
RETURNING least(g.max_in_flight, coalesce(m.max_in_flight, g.max_in_flight)) AS window
