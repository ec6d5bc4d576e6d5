SELECT r.user_id, u.email, r.expires_at FROM password_resets r JOIN users u ON u.id = r.user_id
WHERE r.token_sha256 = %(token_sha256)s AND r.used_at IS NULL AND r.expires_at > now()
