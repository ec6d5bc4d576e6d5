SELECT id, environment_id, name, hint, scopes, created_at, expires_at, revoked_at, last_used_at
FROM api_keys WHERE environment_id = %(environment_id)s AND (%(include_revoked)s OR revoked_at IS NULL)
ORDER BY created_at, id
