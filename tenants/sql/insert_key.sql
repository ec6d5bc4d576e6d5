INSERT INTO api_keys (id, organisation_id, project_id, environment_id, name, secret_sha256, hint, scopes, expires_at)
VALUES (%(id)s, %(organisation_id)s, %(project_id)s, %(environment_id)s, %(name)s, %(secret_sha256)s, %(hint)s,
        %(scopes)s, %(expires_at)s)
RETURNING id, environment_id, name, hint, scopes, created_at, expires_at, revoked_at, last_used_at
