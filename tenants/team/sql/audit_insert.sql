INSERT INTO audit_events (organisation_id, actor_user_id, actor, action, target, details)
VALUES (%(organisation_id)s, %(actor_user_id)s, %(actor)s, %(action)s, %(target)s, %(details)s)
