UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
WHERE id = %(id)s AND environment_id = %(environment_id)s
RETURNING id, environment_id, name, hint, scopes, created_at, expires_at, revoked_at, last_used_at
