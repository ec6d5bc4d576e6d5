SELECT m.user_id, u.email, m.role, m.created_at AS joined_at
FROM memberships m JOIN users u ON u.id = m.user_id
WHERE m.organisation_id = %(organisation_id)s
ORDER BY array_position(ARRAY['owner', 'admin', 'developer', 'viewer'], m.role), lower(u.email)
