-- The environment as a member of its organisation sees it: no row for anyone else.
SELECT e.id, e.organisation_id, e.project_id, e.name, e.created_at, m.role
FROM environments e
JOIN memberships m ON m.organisation_id = e.organisation_id AND m.user_id = %(user_id)s
WHERE e.id = %(environment_id)s
