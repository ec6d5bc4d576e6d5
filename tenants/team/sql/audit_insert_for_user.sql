-- One event in every organisation the user belongs to (a change to the user, not to one of them).
INSERT INTO audit_events (organisation_id, actor_user_id, actor, action, target, details)
SELECT m.organisation_id, %(actor_user_id)s, %(actor)s, %(action)s, %(target)s, %(details)s
FROM memberships m WHERE m.user_id = %(user_id)s
