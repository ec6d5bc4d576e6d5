-- Every membership of the organisation, locked: role changes and removals are serialised, so
-- two owners cannot demote each other at once and leave none.
SELECT m.user_id, u.email, m.role FROM memberships m JOIN users u ON u.id = m.user_id
WHERE m.organisation_id = %(organisation_id)s
ORDER BY m.user_id
FOR UPDATE OF m
