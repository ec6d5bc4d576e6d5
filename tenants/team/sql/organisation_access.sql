-- The caller's role in an organisation, with its name: no row for anyone not a member.
SELECT o.id, o.name, m.role
FROM memberships m JOIN organisations o ON o.id = m.organisation_id
WHERE m.organisation_id = %(organisation_id)s AND m.user_id = %(user_id)s
