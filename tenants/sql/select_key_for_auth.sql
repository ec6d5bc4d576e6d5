SELECT k.id AS key_id, k.secret_sha256, k.scopes, k.expires_at, k.revoked_at,
       k.organisation_id, k.project_id, k.environment_id, e.name AS environment
FROM api_keys k JOIN environments e ON e.id = k.environment_id
WHERE k.secret_sha256 = %(secret_sha256)s
