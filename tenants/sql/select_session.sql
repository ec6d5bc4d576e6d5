SELECT s.user_id, s.csrf_token, s.expires_at, u.email FROM user_sessions s JOIN users u ON u.id = s.user_id
WHERE s.token_sha256 = %(token_sha256)s AND s.expires_at > now()
