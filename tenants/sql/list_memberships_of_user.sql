SELECT m.organisation_id, m.role, o.name AS organisation_name
FROM memberships m JOIN organisations o ON o.id = m.organisation_id
WHERE m.user_id = %(user_id)s ORDER BY o.created_at
