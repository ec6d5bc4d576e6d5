SELECT count(*) AS n FROM api_keys
WHERE environment_id = %(environment_id)s AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
