-- Newest first; a page continues below the last id of the one before.
SELECT id, at, actor, action, target, details FROM audit_events
WHERE organisation_id = %(organisation_id)s AND (%(before_id)s::bigint IS NULL OR id < %(before_id)s)
ORDER BY id DESC
LIMIT %(limit)s
