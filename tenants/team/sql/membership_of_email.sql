SELECT m.user_id, m.role FROM memberships m JOIN users u ON u.id = m.user_id
WHERE m.organisation_id = %(organisation_id)s AND lower(u.email) = lower(%(email)s)
